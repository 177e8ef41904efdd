"""Fixtures for the web UI tests: a headless Chromium, and the reference path running as
processes (engine emulator, collector, gateway) with a real load test already judged."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from spanbudget.app.processes import Supervisor
from spanbudget.app.stack import spanbudget_command

from tests.collector.ui.browser import Browser, install_playwright_core
from tests.support.servers import wait_until
from tests.support.stack import corpus_copy, local_stack

REPO = Path(__file__).resolve().parents[3]
BROWSER_FOLDER = REPO / ".browser"  # gitignored: playwright-core from npm
JAEGER_UI = "http://jaeger.invalid:16686"
RUN_ID = "ui-run"
ENV = {
    "HF_HUB_OFFLINE": "1",
    "OTEL_BSP_SCHEDULE_DELAY": "200",
    "PYTHONUNBUFFERED": "1",
    # Alerts on a 100x shorter clock, and on few traces, so that a burst fires one.
    "SPANBUDGET_COLLECTOR_ALERT_MIN_TRACES": "1",
    "SPANBUDGET_COLLECTOR_ALERT_MIN_OVERRUNS": "1",
}


@pytest.fixture(scope="session")
def browser(
    debian_binary: Callable[[str], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Browser]:
    chromium = debian_binary("chromium")
    debian_binary("node")
    debian_binary("npm")
    folder = install_playwright_core(BROWSER_FOLDER)
    opened = Browser(folder, chromium, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield opened
    finally:
        opened.close()


@dataclass
class UiStack:
    collector: str
    gateway: str
    run_dir: Path
    report: dict[str, Any]
    client: httpx.Client

    def api(self, path: str, **params: Any) -> Any:
        response = self.client.get(path, params=params)
        response.raise_for_status()
        return response.json()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, small_corpus: Path) -> Iterator[UiStack]:
    """Engine, collector and gateway as processes; a 24-request load test through them."""
    root = tmp_path_factory.mktemp("ui-stack")
    data = corpus_copy(small_corpus, root)
    env = {**os.environ, **ENV}
    spec = local_stack(data, root, ENV, ("--alert-window-scale", "0.01", "--jaeger-ui", JAEGER_UI))
    collector = spec.collector_url
    children = spec.children()
    supervisor = Supervisor()
    # Idle connections dropped after 1 s: uvicorn closes them after 5, httpx's default, and a
    # request sent on one as the server closes it is reset.
    client = httpx.Client(base_url=collector, timeout=30, limits=httpx.Limits(keepalive_expiry=1.0))
    try:
        for child in children:
            supervisor.start(child)
        for child in children:
            supervisor.wait_healthy(child, 180)
        run_dir = root / "run"
        result = subprocess.run(
            spanbudget_command(
                "loadtest",
                "--target",
                spec.gateway_url,
                "--collector",
                collector,
                "--requests",
                "24",
                "--rate",
                "6",
                "--run-id",
                RUN_ID,
                "--out",
                str(run_dir),
                "--budget",
                str(REPO / "budget.yaml"),
            ),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
            env=env,
        )
        assert result.returncode in (0, 1), result.stdout + result.stderr
        report = json.loads((run_dir / "report.json").read_text())
        assert report["verdicts"]["missing"] == 0, report["verdicts"]
        yield UiStack(collector, spec.gateway_url, run_dir, report, client)
    finally:
        client.close()
        supervisor.stop_all()


def wait_for_verdicts(stack: UiStack, trace_ids: list[str]) -> None:
    def judged() -> bool:
        return all(stack.client.get(f"/api/verdicts/{t}").status_code == 200 for t in trace_ids)

    wait_until(judged, f"verdicts of {len(trace_ids)} traces", timeout=30, every=0.2)
