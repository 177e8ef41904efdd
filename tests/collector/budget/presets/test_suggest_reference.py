"""`spanbudget budget suggest` on a real load-test run of the reference path: the stack as
separate processes on 127.0.0.1 (engine emulator, collector, gateway), driven by the load
tester; the collector forwards every span to a receiver here, and those spans are the input.

Judged with the suggested limits, the same traces hold the objective jointly (the share
the file states); every limit lies between the p95 the load-test report observed and the
largest value plus the stated headroom, and the output loads with the strict loader. The
GenAI semconv preset judges the same spans: the gateway traces itself after the
conventions (time_to_first_chunk on its chat span).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from spanbudget.app.cli import app
from spanbudget.app.stack import spanbudget_command
from spanbudget.collector.budget.loader import parse_budget
from spanbudget.collector.spans import Span, group_by_trace
from spanbudget.collector.suggest.budget import ceil_ms
from typer.testing import CliRunner

from tests.collector.budget.presets.conftest import Receiver
from tests.support.servers import ServerThread, wait_until
from tests.support.stack import corpus_copy, local_stack, running

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[4]
REQUESTS = 120  # suggest refuses fewer than 100 judged traces
ENV = {"HF_HUB_OFFLINE": "1", "OTEL_BSP_SCHEDULE_DELAY": "200", "PYTHONUNBUFFERED": "1"}


@dataclass
class ReferenceRun:
    traces: Path  # the forwarded spans, as the OTel Collector's file exporter writes proto
    spans: list[Span]
    report: dict[str, Any]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory: pytest.TempPathFactory, small_corpus: Path) -> ReferenceRun:
    root = tmp_path_factory.mktemp("reference")
    data = corpus_copy(small_corpus, root)
    receiver = Receiver()
    with ServerThread(receiver.app) as forward_to:
        spec = local_stack(data, root, ENV, ("--forward-otlp", forward_to.url))
        collector = spec.collector_url
        budget = str(spec.budget)
        with running(spec.children()):
            out = root / "run"
            result = subprocess.run(
                spanbudget_command("loadtest", "--target", spec.gateway_url,
                           "--collector", collector, "--requests", str(REQUESTS), "--rate", "10",
                           "--run-id", "suggest", "--out", str(out), "--budget", budget),
                capture_output=True, text=True, timeout=300, cwd=REPO, env={**os.environ, **ENV},
            )  # fmt: skip
            assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
            report = json.loads((out / "report.json").read_text())
            assert report["errors"] == 0
            assert report["verdicts"]["missing"] == 0

            def judged_traces() -> int:
                traces = group_by_trace(receiver.spans()).values()
                return sum(any(s.name == "llm_request" for s in t) for t in traces)

            wait_until(lambda: judged_traces() >= REQUESTS, "the forwarded traces", 60)
    traces = root / "forwarded.otlp"
    with traces.open("wb") as file:  # the file exporter's `format: proto` framing
        for body in receiver.bodies:
            file.write(len(body).to_bytes(4, "big") + body)
    return ReferenceRun(traces, receiver.spans(), report)


def run_cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def stage_values(verdicts: list[dict[str, Any]]) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    for verdict in verdicts:
        for stage in verdict["stages"]:
            if stage["ms"] is not None and stage["status"] != "absent":
                values.setdefault(stage["name"], []).append(stage["ms"])
    return values


def limits_of(text: str) -> dict[str, float]:
    """The suggested stage limits. The total is TTFT's own percentile, which the stages'
    percentiles may add up to more than: the loader's one warning, which the file explains."""
    budget = parse_budget(text, "suggested.yaml")
    for warning in budget.warnings:
        assert "the stage limits add up to" in warning, warning
        assert "percentiles do not add up" in text
    return {stage.name: stage.limit_ms for stage in budget.budget.stages}


def judged_with(text: str, traces: Path) -> list[dict[str, Any]]:
    suggested = traces.parent / "suggested.yaml"
    suggested.write_text(text)
    verdicts: list[dict[str, Any]] = json.loads(
        run_cli("check", str(traces), "--budget", str(suggested),
                "--format", "json", "--fail-on", "never")
    )  # fmt: skip
    assert len(verdicts) == REQUESTS
    return verdicts


def assert_holds_jointly(text: str, verdicts: list[dict[str, Any]]) -> None:
    """The share within every limit is the one the file states, and at least 95 %."""
    within = sum(v["status"] in ("ok", "warn") for v in verdicts)
    assert within >= 0.95 * REQUESTS, (within, text)
    assert f"Judged with these numbers, {within} of {REQUESTS} traces" in text
    limits = limits_of(text)
    for name, values in stage_values(verdicts).items():
        p95 = float(np.percentile(values, 95))
        # At most the largest value plus the headroom, rounded up as the file rounds.
        assert p95 <= limits[name] <= max(ceil_ms(max(values) * 1.1), 1.0), (name, values, limits)


def test_suggested_limits_hold_the_objective_jointly(reference_run: ReferenceRun) -> None:
    text = run_cli("budget", "suggest", str(reference_run.traces), "--budget", "budget.yaml")
    limits = limits_of(text)
    observed = {s["name"]: s["p95_ms"] for s in reference_run.report["stages"] if s["count"]}
    assert observed.keys() == limits.keys()
    for name, p95 in observed.items():
        assert limits[name] >= p95, (name, p95, limits)
    assert_holds_jointly(text, judged_with(text, reference_run.traces))
    # Every number says where it came from: a median and a high percentile per stage.
    assert text.count(f" of {REQUESTS} traces was") >= 2 * len(observed)
    assert text.count("  # ") >= 2 * len(limits) + 2


def test_stages_from_the_structure_are_the_reference_paths(reference_run: ReferenceRun) -> None:
    text = run_cli("budget", "suggest", str(reference_run.traces))
    limits = limits_of(text)
    # The gateway's children on the critical path, and the caller above it.
    assert {"client", "server", "retrieval", "prompt", "chat"} <= limits.keys()
    assert_holds_jointly(text, judged_with(text, reference_run.traces))


def test_the_genai_preset_judges_the_reference_path(reference_run: ReferenceRun) -> None:
    verdicts = json.loads(
        run_cli("check", str(reference_run.traces), "--preset", "genai", "--format", "json",
                "--fail-on", "never")
    )  # fmt: skip
    assert len(verdicts) == REQUESTS
    for verdict in verdicts:
        assert verdict["status"] not in ("incomplete", "error")
        ms = {s["name"]: s["ms"] for s in verdict["stages"]}
        assert round(sum(ms.values()) + verdict["unattributed_ms"], 2) == verdict["ttft_ms"]
        assert ms["retrieval"] > 0
        assert ms["llm"] > 0
    text = run_cli("budget", "suggest", str(reference_run.traces), "--preset", "genai")
    assert "\nversion: 1\npreset: genai\n" in text
    assert_holds_jointly(text, judged_with(text, reference_run.traces))
