"""One run of the zoo: the traced server, the app under one library (each in its venv), an
OTLP receiver that writes what both export to `spans.jsonl` and passes it on, live, to a
collector as `spanbudget collect` assembles it; for OpenLLMetry, the engine emulator behind
the server as well (vLLM's `llm_request` spans).

A run is what issue 44's zoo is: the file a user would hand to `spanbudget check`, the
collector's verdicts of the same spans, and what the client saw of each request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest
from spanbudget.app.processes import Child, ChildFailed, Supervisor
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.check import evaluate_spans
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.links import MAX_LIST
from spanbudget.collector.readers import read_traces
from spanbudget.collector.spans import Span, group_by_trace

from tests.collector.budget.presets.receiver import Receiver
from tests.collector.budget.presets.venvs import venv_for
from tests.support.collector import BUDGET, Collector, running_collector
from tests.support.servers import ServerThread, free_port, wait_until

__all__ = [
    "ENGINE_VARIANTS",
    "VARIANTS",
    "ZooRun",
    "library_of",
    "machine_load",
    "run_variant",
    "timed",
]

HERE = Path(__file__).resolve().parent
SERVER = HERE / "zoo_server.py"
APP = HERE / "zoo_app.py"
VARIANTS = (
    "openllmetry",
    "openinference",
    "openlit",
    "openlit-nohttp",
    "openai-v2",
    "lc-openinference",
    "lc-openllmetry",
)
ENGINE_VARIANTS = frozenset({"openllmetry"})  # the server streams two requests from vLLM
DECISION_WAIT_S = 1.0  # the collector's; the exporters' batches leave every 100 ms
# The exporters' batch delay (OpenLIT builds its own BatchSpanProcessor, which reads it),
# and the host the processes share, as the SDK's host resource detector would name it: on
# one host, spans are never shifted for clock skew (DESIGN §5 rule 3), while between
# services that name no host a server that streams on past its caller's span is centred in
# it (tests/collector/check: check says so, with this remedy).
_ENV = {
    "OTEL_BSP_SCHEDULE_DELAY": "100",
    "OTEL_RESOURCE_ATTRIBUTES": "host.name=zoo-host",
    "HF_HUB_OFFLINE": "1",
}


def machine_load() -> str:
    """For a timing assertion's message: how busy the machine was."""
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def timed(ok: bool, message: str) -> None:
    """Hold a timing claim between processes (a mark against the client's clock). On a
    machine whose load average is above twice its CPUs, a process waits its turn for
    milliseconds before it reads what another sent: there a miss skips the test with the
    numbers and the load (pytest -ra lists it), so a busy machine reads as not measured,
    never as a pass."""
    if ok:
        return
    if os.getloadavg()[0] > 2 * (os.cpu_count() or 1):
        pytest.skip(f"too busy to time: {message}; {machine_load()}")
    pytest.fail(f"{message}; {machine_load()}")


def library_of(variant: str) -> str:
    """The venv a variant runs in: OpenLIT's, whatever instrumentors it turns off."""
    return "openlit" if variant.startswith("openlit") else variant


@dataclass
class ZooRun:
    """One variant's run: the client's report, the spans file the receiver wrote (and its
    spans as `check` reads them), and `collect`'s verdicts by trace id."""

    variant: str
    report: dict[str, Any]
    spans_path: Path
    spans: list[Span]
    collected: dict[str, dict[str, Any]]
    seconds: float
    _checked: dict[tuple[str, ...], subprocess.CompletedProcess[str]] = field(
        default_factory=dict, repr=False
    )

    @cached_property
    def verdicts(self) -> dict[str, Verdict]:
        """Every trace judged as `spanbudget check` judges it with no preset, by trace id."""
        result = evaluate_spans(self.spans, load_budget(BUDGET).budget)
        return {v.trace_id: v for v in result.verdicts}

    def check(self, *options: str) -> subprocess.CompletedProcess[str]:
        """`spanbudget check` on the spans file, as a user runs it (once per options)."""
        if options not in self._checked:
            self._checked[options] = subprocess.run(
                [sys.executable, "-m", "spanbudget", "check", str(self.spans_path), *options],
                capture_output=True, text=True, timeout=120, cwd=self.spans_path.parent,
                env=os.environ | {"COLUMNS": "200"},
            )  # fmt: skip
        return self._checked[options]

    def requests(self, *shapes: str, stream: bool | None = None) -> list[dict[str, Any]]:
        """The requests of these shapes (all when none named), streamed or not."""
        return [
            r
            for r in self.report["requests"]
            if (not shapes or r["shape"] in shapes) and (stream is None or r["stream"] is stream)
        ]

    def trace(self, trace_id: str) -> list[Span]:
        return group_by_trace(self.spans).get(trace_id, [])


def run_variant(variant: str, out: Path) -> ZooRun:
    """Run the zoo for `variant`, its files under `out`."""
    began = time.monotonic()
    server_python = venv_for("server") / "bin" / "python"
    app_python = venv_for(library_of(variant)) / "bin" / "python"
    upstream = variant in ENGINE_VARIANTS
    receiver = Receiver()
    report_path = out / "report.json"
    with (
        running_collector(out, decision_wait_seconds=DECISION_WAIT_S) as collector,
        ServerThread(receiver.app) as otlp,
    ):
        receiver.forward_to = collector.url
        supervisor = Supervisor()
        try:
            engine = _start_engine(supervisor, otlp.url, out) if upstream else None
            engine_args = (
                [] if engine is None else ["--engine", engine.health_url.removesuffix("/health")]
            )
            base = _start_server(supervisor, server_python, [*engine_args, "--otlp", otlp.url], out)
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | _ENV
            app = subprocess.run(
                [str(app_python), str(APP), variant, "--base", base, "--otlp", otlp.url,
                 "--out", str(report_path), *(["--upstream"] if upstream else [])],
                capture_output=True, text=True, timeout=300, env=env, cwd=out,
            )  # fmt: skip
            (out / "app.log").write_text(app.stdout + app.stderr)
            if upstream and app.returncode == 0:
                # The engine exports each llm_request a moment after its request ends.
                wait_until(lambda: _engine_spans(receiver) >= 2, "the engine's llm_request spans")
        finally:
            supervisor.stop_all()  # the server flushes its spans as it stops
        assert app.returncode == 0, app.stdout[-2000:] + app.stderr[-3000:]
        report = json.loads(report_path.read_text())
        assert not report["errors"], report["errors"]
        spans_path = out / "spans.jsonl"
        receiver.write(spans_path)
        spans = read_traces(spans_path)  # as `spanbudget check` reads the file
        collected = _settled_verdicts(collector, receiver, spans)
    return ZooRun(variant, report, spans_path, spans, collected, time.monotonic() - began)


def _start_server(supervisor: Supervisor, python: Path, arguments: list[str], out: Path) -> str:
    """The zoo's server started and answering /health; its base URL."""
    child = _start_on_a_free_port(
        supervisor,
        "server",
        lambda port: [str(python), str(SERVER), "--port", str(port), *arguments],
        out,
        _ENV,
    )
    return child.health_url.removesuffix("/health")


def _start_engine(supervisor: Supervisor, otlp: str, out: Path) -> Child:
    """`spanbudget engine` exporting to the receiver, started and answering /health."""
    return _start_on_a_free_port(
        supervisor,
        "engine",
        lambda port: [sys.executable, "-m", "spanbudget", "engine", f"--listen=127.0.0.1:{port}"],
        out,
        _ENV | {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp},
    )


def _start_on_a_free_port(
    supervisor: Supervisor,
    name: str,
    command: Callable[[int], list[str]],
    out: Path,
    env: dict[str, str],
    tries: int = 3,
) -> Child:
    """`command(port)` started and answering /health on 127.0.0.1:port. The port was free
    a moment before the process binds it, and another process may take it meanwhile: one
    that exits before it answers is started again on another port. One that neither
    answers nor exits within a minute fails the run, with its log."""
    attempt = 1
    while True:
        port = free_port()
        health = f"http://127.0.0.1:{port}/health"
        child = Child(name, command(port), health, out / f"{name}.log", env)
        supervisor.start(child)
        try:
            supervisor.wait_healthy(child, 60)
            return child
        except ChildFailed:
            assert child.process is not None
            if child.process.poll() is None or attempt == tries:
                raise
            supervisor.children.remove(child)
            attempt += 1


def _engine_spans(receiver: Receiver) -> int:
    return sum(1 for span in receiver.spans() if span.name == "llm_request")


def _settled_verdicts(
    collector: Collector, receiver: Receiver, spans: Iterable[Span]
) -> dict[str, dict[str, Any]]:
    """Every verdict the collector holds once it has judged what `check` judges and no
    revision can come: late spans revise a verdict once quiet for the decision wait."""
    expected = evaluate_spans(list(spans), load_budget(BUDGET).budget).verdicts
    for verdict in expected:
        collector.verdict(verdict.trace_id, timeout=DECISION_WAIT_S + 15)
    settled = receiver.last_arrival + DECISION_WAIT_S + 0.5
    time.sleep(max(0.0, settled - time.monotonic()))
    response = collector.client.get("/api/verdicts", params={"limit": MAX_LIST})
    response.raise_for_status()
    listed: list[dict[str, Any]] = response.json()
    return {v["trace_id"]: v for v in listed}
