"""`GET /api/traces/{trace_id}`: a judged trace's spans as OTLP/JSON that the collector's
readers, `spanbudget check` and the collector itself read back to the same verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spanbudget.app.cli import app
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.readers import parse_traces
from typer.testing import CliRunner

from tests.support.collector import running_collector
from tests.support.judging import BUDGET, NOW

REPO = Path(__file__).resolve().parents[3]
STACK = REPO / "tests" / "fixtures" / "stack" / "with-load-test-client.json"
TOKEN = "s3cret-read-token"


def test_a_judged_trace_comes_back_as_otlp_json_with_the_same_verdict(tmp_path: Path) -> None:
    spans = parse_traces(STACK.read_bytes(), STACK.name)  # the real stack's spans, hosts too
    trace_id = spans[0].trace_id
    with running_collector(tmp_path) as collector:
        response = collector.post(STACK.read_bytes(), "application/json")  # as captured
        assert response.status_code == 200
        served = collector.verdict(trace_id)
        kept = collector.pipeline.spans
        assert kept is not None
        assert kept.wait_idle(10)
        response = collector.client.get(f"/api/traces/{trace_id.upper()}")
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        body = response.content
    document = json.loads(body)
    services = {
        kv["value"]["stringValue"]
        for rs in document["resourceSpans"]
        for kv in rs["resource"]["attributes"]
        if kv["key"] == "service.name"
    }
    assert services == {"spanbudget-loadtest", "rag-gateway", "vllm"}
    back = parse_traces(body, "api")
    assert sorted((s.span_id, s.start_ns, s.end_ns) for s in back) == sorted(
        (s.span_id, s.start_ns, s.end_ns) for s in spans
    )
    assert {s.host for s in back} == {"vm"}
    again = Evaluator(BUDGET).evaluate(back, evaluated_at=NOW)
    assert again is not None
    judged = again.to_dict()
    for key in ("status", "ttft_ms", "total", "stages", "unattributed_ms", "blame"):
        assert judged[key] == served[key], key  # (the collector adds the engine's context)
    file = tmp_path / "trace.json"
    file.write_bytes(body)
    result = CliRunner().invoke(app, ["check", str(file), "--format", "json"])
    assert result.exit_code == 0, result.output
    checked = json.loads(result.stdout[result.stdout.index("[") :])
    assert [v["ttft_ms"] for v in checked] == [served["ttft_ms"]] == [52.59]


def test_unknown_and_malformed_trace_ids(tmp_path: Path) -> None:
    with running_collector(tmp_path) as collector:
        assert collector.client.get("/api/traces/" + "ab" * 16).status_code == 404
        assert collector.client.get("/api/traces/not-a-trace-id").status_code == 400


@pytest.mark.parametrize(("header", "status"), [(None, 401), (f"Bearer {TOKEN}", 404)])
def test_the_api_token_guards_it(tmp_path: Path, header: str | None, status: int) -> None:
    with running_collector(tmp_path, api_token=TOKEN) as collector:
        headers = {"Authorization": header} if header else {}
        response = collector.client.get("/api/traces/" + "ab" * 16, headers=headers)
        assert response.status_code == status
