"""Start and stop real processes for the deployment tests, and feed the collector a trace."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from spanbudget.app.processes import Child

from tests.support.binaries import go_binary
from tests.support.otlp import to_request
from tests.support.servers import free_port
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[2]


def spanbudget_command(*args: str) -> list[str]:
    """`spanbudget ARGS` with the console script of the running interpreter's environment."""
    return [str(Path(sys.executable).with_name("spanbudget")), *args]


def start_process(command: list[str], health_url: str, log: Path) -> subprocess.Popen[bytes]:
    """Start COMMAND (output to LOG) and wait until HEALTH_URL answers 200."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OTEL_SDK_DISABLED": "true"}
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop_process(process)
            pytest.fail(f"{command} exited {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(health_url, timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    stop_process(process)
    pytest.fail(f"{command} never became healthy:\n{log.read_text()}")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def send_overrun_trace(collector: str, trace_id: str) -> None:
    """Send one trace whose retrieval stage overruns (TTFT 190 ms) and wait for its verdict."""
    body = to_request(rag_trace(retrieval=50, trace_id=trace_id).spans)
    response = httpx.post(
        f"{collector}/v1/traces",
        content=body.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    response.raise_for_status()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if httpx.get(f"{collector}/api/verdicts/{trace_id}", timeout=2).status_code == 200:
            return
        time.sleep(0.1)
    pytest.fail("the collector never decided the trace")


@dataclass(frozen=True)
class Otelcol:
    """The Collector `make binaries` builds, running one of the repository's deploy/otelcol*
    files on free ports of 127.0.0.1 (the files' OTELCOL_* variables), `env` on top."""

    config: str
    env: Mapping[str, str] = field(default_factory=dict)
    otlp_grpc_port: int = field(default_factory=free_port)
    otlp_http_port: int = field(default_factory=free_port)
    annotated_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)

    @property
    def otlp_http(self) -> str:
        return f"http://127.0.0.1:{self.otlp_http_port}"

    @property
    def otlp_grpc(self) -> str:
        return f"127.0.0.1:{self.otlp_grpc_port}"

    @property
    def annotated(self) -> str:
        return f"http://127.0.0.1:{self.annotated_port}/v1/traces"

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def child(self, name: str, logs: Path) -> Child:
        env = {
            "OTELCOL_LISTEN_HOST": "127.0.0.1",
            "OTELCOL_OTLP_GRPC_PORT": str(self.otlp_grpc_port),
            "OTELCOL_OTLP_HTTP_PORT": str(self.otlp_http_port),
            "OTELCOL_ANNOTATED_PORT": str(self.annotated_port),
            "OTELCOL_HEALTH_PORT": str(self.health_port),
            "OTELCOL_METRICS_PORT": str(self.metrics_port),
            **self.env,
        }
        command = [
            str(go_binary("otelcol-spanbudget")),
            "--config",
            str(REPO / "deploy" / self.config),
        ]
        return Child(
            name, command, f"http://127.0.0.1:{self.health_port}/", logs / f"{name}.log", env
        )


def budget_collector(
    name: str, port: int, data: Path, *extra: str, grpc_port: int | None = None
) -> Child:
    """`spanbudget collect` on 127.0.0.1:`port`, its store under `data`, untraced; OTLP/gRPC
    on 127.0.0.1:`grpc_port`, or off (never the shared default 4317)."""
    command = spanbudget_command(
        "collect",
        *("--listen", f"127.0.0.1:{port}"),
        *("--grpc-listen", "off" if grpc_port is None else f"127.0.0.1:{grpc_port}"),
        *("--budget", str(REPO / "budget.yaml")),
        *("--db", str(data / f"{name}.db")),
        *("--decision-wait", "0.5s"),
        *extra,
    )
    env = {"HF_HUB_OFFLINE": "1", "OTEL_SDK_DISABLED": "true"}
    return Child(name, command, f"http://127.0.0.1:{port}/readyz", data / f"{name}.log", env)


def metric_total(text: str, name: str, **labels: str) -> float:
    """The sum of a Prometheus text exposition's samples of `name` (or `name`_total, the
    counters' suffix which the Collector's own telemetry leaves out) with these labels."""
    total = 0.0
    for line in text.splitlines():
        sample = line.split("{", 1)[0].split(" ", 1)[0]
        if sample not in (name, f"{name}_total"):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def all_verdicts(collector: str) -> dict[str, dict[str, Any]]:
    """Every verdict a budget collector stores, by trace id (paged through the API)."""
    found: dict[str, dict[str, Any]] = {}
    params: dict[str, str | int] = {"limit": 1000}
    while True:
        page = httpx.get(f"{collector}/api/verdicts", params=params, timeout=10).json()
        for verdict in page:
            found[verdict["trace_id"]] = verdict
        if len(page) < 1000:
            return found
        params["before"] = page[-1]["trace_id"]
