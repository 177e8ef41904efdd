"""`spanbudget whatif` reads a load-test run's traces, or a window's, from a real collector
(in-process, on a real port) through `GET /api/verdicts` and `GET /api/traces/{id}`, and
trace files as `check` reads them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from spanbudget.app.cli import app
from spanbudget.collector.live.app import app_for
from spanbudget.collector.live.pipeline import assemble
from spanbudget.collector.live.settings import CollectorSettings
from spanbudget.collector.loadtest.client import RequestRecord
from spanbudget.collector.loadtest.files import REQUESTS_CSV, write_results
from spanbudget.collector.loadtest.records import RequestResult
from spanbudget.collector.whatif import SourceError, from_collector_window, from_run
from typer.testing import CliRunner

from tests.support.judging import BUDGET, REPO
from tests.support.otlp import to_otlp_json, to_request
from tests.support.servers import ServerThread
from tests.support.traces import rag_trace

TOKEN = "whatif-token"
# Four traces: two nominal (prefill +0, +10), two in the burst (prefill +40, +60).
PHASES = {"nominal": (0, 10), "burst": (40, 60)}


def _trace_id(extra: int) -> str:
    return f"{extra + 1:032x}"


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A collector as `spanbudget collect` assembles it, with an API token, that has judged
    the four traces and kept their spans."""
    tmp = tmp_path_factory.mktemp("collector")
    settings = CollectorSettings.from_flat(
        grpc_listen="off",
        db_path=tmp / "verdicts.db",
        budget_path=REPO / "budget.yaml",
        decision_wait_seconds=0.2,
        api_token=TOKEN,
    )
    pipeline = assemble(settings, BUDGET, registry=CollectorRegistry(), alerts=False)
    pipeline.start()
    try:
        with ServerThread(app_for(pipeline)) as server:
            with httpx.Client(base_url=server.url, timeout=10) as client:
                for extras in PHASES.values():
                    for extra in extras:
                        spans = rag_trace(prefill=extra, trace_id=_trace_id(extra)).spans
                        body = to_request(spans).SerializeToString()
                        response = client.post(
                            "/v1/traces",
                            content=body,
                            headers={"Content-Type": "application/x-protobuf"},
                        )
                        assert response.status_code == 200
                kept = pipeline.spans
                assert kept is not None
                assert pipeline.core.wait_idle(10)  # every trace decided (0.2 s wait)
                assert kept.wait_idle(10)
            yield server.url
    finally:
        pipeline.close()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    results = [
        RequestResult(
            RequestRecord(index=i, phase=phase, scheduled_s=0.0, trace_id=_trace_id(extra))
        )
        for i, (phase, extra) in enumerate((p, e) for p, es in PHASES.items() for e in es)
    ]
    write_results(tmp_path / REQUESTS_CSV, BUDGET.stage_names(), results)
    return tmp_path


def test_a_run_phase_from_the_collector(collector: str, run_dir: Path) -> None:
    with httpx.Client(timeout=10) as client:
        source = from_run(run_dir, collector, client, phase="burst", token=TOKEN)
        assert sorted(t[0].trace_id for t in source.traces) == [_trace_id(40), _trace_id(60)]
        assert source.problems == []
        whole = from_run(run_dir, collector, client, token=TOKEN)
        assert len(whole.traces) == 4
        with pytest.raises(SourceError, match="phases are nominal, burst"):
            from_run(run_dir, collector, client, phase="ramp", token=TOKEN)
        with pytest.raises(SourceError, match="HTTP 401"):
            from_run(run_dir, collector, client)


def test_a_collector_window(collector: str) -> None:
    with httpx.Client(timeout=10) as client:
        source = from_collector_window(collector, "1h", client, token=TOKEN)
    assert sorted(t[0].trace_id for t in source.traces) == sorted(
        _trace_id(e) for es in PHASES.values() for e in es
    )


def test_the_command_on_a_run_prints_json(collector: str, run_dir: Path) -> None:
    # The burst's prefill 138 and 158 ms: both over the 120 limit; halved, 69 and 79.
    args = ["whatif", "--run", str(run_dir), "--phase", "burst", "--collector", collector]
    args += ["--collector-token", TOKEN, "--stage", "prefill=x0.5", "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout[result.stdout.index("{") :])
    assert (data["before"]["within_budget"], data["after"]["within_budget"]) == (0, 2)
    assert data["before"]["p95_ms"]["prefill"] == pytest.approx(157.0)
    assert data["after"]["p95_ms"]["prefill"] == pytest.approx(78.5)
    assert data["before"]["blamed_first"]["prefill"] == 2
    assert data["blamed_next"] is None


def test_the_command_on_files_and_its_usage_errors(tmp_path: Path) -> None:
    file = tmp_path / "traces.json"
    file.write_text(to_otlp_json(rag_trace(retrieval=30).spans))
    result = CliRunner().invoke(app, ["whatif", str(file), "--stage", "retrieval=-30ms"])
    assert result.exit_code == 0, result.output
    assert "within budget after:  1 of 1" in result.stdout
    assert "blamed next: no stage" in result.stdout
    for bad in (
        [str(file)],
        [str(file), "--stage", "retrieval=0.5"],
        ["--stage", "retrieval=x0.5"],
        [str(file), "--stage", "retrieval=x0.5", "--phase", "burst"],
        ["--since", "1h", "--stage", "retrieval=x0.5"],
    ):
        assert CliRunner().invoke(app, ["whatif", *bad]).exit_code == 2, bad
