"""Live processes for the deployment tests: a budget collector and the engine emulator."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.servers import free_port

from .metric_names import scrape_sample_names
from .processes import (
    REPO,
    send_overrun_trace,
    spanbudget_command,
    start_process,
    stop_process,
)


@pytest.fixture(scope="package")
def live_collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a running budget collector that has judged one overrun trace."""
    tmp = tmp_path_factory.mktemp("collector")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = spanbudget_command(
        "collect",
        *("--listen", f"127.0.0.1:{port}"),
        *("--grpc-listen", "off"),  # not the shared default 4317
        *("--budget", str(REPO / "budget.yaml")),
        *("--db", str(tmp / "verdicts.db")),
        *("--decision-wait", "0.2s"),
    )
    process = start_process(command, f"{base}/healthz", tmp / "collector.log")
    try:
        send_overrun_trace(base, uuid.uuid4().hex)
        yield base
    finally:
        stop_process(process)


@pytest.fixture(scope="package")
def live_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a running engine emulator."""
    tmp = tmp_path_factory.mktemp("engine")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = spanbudget_command("engine", "--listen", f"127.0.0.1:{port}")
    process = start_process(command, f"{base}/healthz", tmp / "engine.log")
    try:
        yield base
    finally:
        stop_process(process)


@pytest.fixture(scope="package")
def exposed_names(live_collector: str, live_engine: str) -> set[str]:
    """The metric names the running collector and emulator really expose."""
    return scrape_sample_names([f"{live_collector}/metrics", f"{live_engine}/metrics"])
