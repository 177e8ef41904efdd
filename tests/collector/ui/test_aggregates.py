"""The numbers behind the pages: the overview's columns agree with the store's own SQL
summary, a run's page with the load tester's report, and spans come from Jaeger when the
collector no longer keeps them."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Response
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.loadtest.client import RequestRecord
from spanbudget.collector.loadtest.records import join
from spanbudget.collector.loadtest.report import build_report
from spanbudget.collector.loadtest.report_model import RunInfo
from spanbudget.collector.sinks.store import VerdictStore
from spanbudget.collector.stats import percentile
from spanbudget.collector.ui.columns import VerdictColumns
from spanbudget.collector.ui.run_report import run_report, run_verdicts
from spanbudget.collector.ui.trace_spans import SpanSource, TraceSpans

from tests.support.collector import otlp_json, running_collector
from tests.support.otlp import to_request
from tests.support.servers import ServerThread
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
BUDGET: Budget = load_budget(REPO / "budget.yaml").budget
NOW = time.time()


def verdicts(count: int, run_of: Any = lambda i: f"run-{i % 3}") -> list[Verdict]:
    """Varied verdicts: overruns, server-only traces (network unmeasured), incomplete ones."""
    evaluator = Evaluator(BUDGET)
    made = []
    for i in range(count):
        spans = rag_trace(
            trace_id=f"{i + 1:032x}",
            retrieval=(i * 7) % 45,
            queue=(i * 11) % 50,
            client_root=i % 4 != 0,
            marks=i % 9 != 0,
        ).spans
        at = datetime.fromtimestamp(NOW - 3600 + i * 3600 / count, UTC)
        verdict = evaluator.evaluate(spans, evaluated_at=at)
        assert verdict is not None
        made.append(
            replace(verdict, attributes={**verdict.attributes, "loadtest.run_id": run_of(i)})
        )
    return made


@pytest.fixture
def store(tmp_path: Path) -> VerdictStore:
    store = VerdictStore(tmp_path / "v.db", retention_seconds=86400, retention_count=10**6)
    store.write([(v, 12) for v in verdicts(300)])
    return store


def same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() <= b.keys() or b.keys() <= a.keys()
    for key in a.keys() & b.keys():
        assert a[key] == pytest.approx(b[key], rel=1e-12, abs=1e-12), key


@pytest.mark.parametrize(
    ("since", "run_id"),
    [(None, None), (NOW - 1800, None), (None, "run-1")],
    # Named, not by value: each pytest-xdist worker has its own NOW, and the workers must
    # collect the same test ids.
    ids=["everything", "last-half-hour", "one-run"],
)
def test_columns_give_the_summary_of_the_store(
    store: VerdictStore, since: float | None, run_id: str | None
) -> None:
    columns = VerdictColumns(store.path)
    selection = columns.select(since=since, run_id=run_id)
    summary = store.summary(since=since, run_id=run_id)
    assert len(selection) == summary["traces"]
    assert {k: v for k, v in selection.status_counts().items() if v} == {
        k: v for k, v in summary["status_counts"].items() if v
    }
    for stage in summary["stages"]:
        same(selection.describe(stage["name"]), stage)
    same(selection.describe(None), summary["ttft"])
    columns.close()


def test_columns_follow_new_verdicts_and_retention(store: VerdictStore) -> None:
    columns = VerdictColumns(store.path)
    assert len(columns.select()) == 300
    more = [replace(v, trace_id=f"f{i:031x}") for i, v in enumerate(verdicts(20))]
    store.write([(v, 12) for v in more])
    assert len(columns.select()) == 320
    store.retention_count = 100
    store.prune(time.time())
    selection = columns.select()
    assert len(selection) == store.summary()["traces"] == 100
    same(selection.describe("retrieval"), store.summary()["stages"][2])
    columns.close()


def test_p95_over_time_is_each_slice_s_exact_p95(tmp_path: Path) -> None:
    made = verdicts(300)
    store = VerdictStore(tmp_path / "v.db", retention_seconds=86400, retention_count=10**6)
    store.write([(v, 12) for v in made])
    columns = VerdictColumns(store.path)
    start, end = NOW - 3601, NOW - 1  # no verdict on a slice's edge: they are 12 s apart
    starts, series = columns.select().p95_over_time(["retrieval"], start, end, 12)
    assert starts == [start + 300 * i for i in range(12)]
    for i, slice_start in enumerate(starts):
        inside = sorted(
            v.stage("retrieval").ms or 0.0
            for v in made
            if v.ttft_ms is not None
            and slice_start <= v.evaluated_at.timestamp() < slice_start + 300
        )
        assert series["retrieval"][i] == (percentile(inside, 95) if inside else None), i
    columns.close()


def test_the_run_page_has_the_numbers_of_the_load_test_report(store: VerdictStore) -> None:
    """As `spanbudget loadtest` joins every request's verdict, so does the run page; and
    its stage figures are the ones the store's SQL summary serves for the run."""
    mine = [Verdict.from_dict(v) for v in store.query(run_id="run-2", limit=1000)]
    report = run_report(run_verdicts(store, "run-2"), BUDGET, "run-2")
    records = [
        RequestRecord(i, "", 0.0, status_code=200, trace_id=v.trace_id) for i, v in enumerate(mine)
    ]
    expected = build_report(
        join(records, {v.trace_id: v for v in mine}), BUDGET, RunInfo("run-2", "", "", "", 1.0, {})
    )
    assert report.stages == expected.stages
    assert report.ttft == expected.ttft
    assert report.by_status == expected.by_status
    assert (report.within_limits, report.slo_met) == (expected.within_limits, expected.slo_met)
    assert [s.trace_id for s in report.slowest] == [s.trace_id for s in expected.slowest]
    assert report.requests == len(mine) == 100
    served = store.summary(run_id="run-2")
    assert report.ttft.to_dict() == served["ttft"]
    by_name = {s["name"]: s for s in served["stages"]}
    for line in report.stages:
        assert {"name": line.name, **line.summary.to_dict()} == by_name[line.name]
    assert report.client_ttft.count == report.itl.count == 0  # only the client has those


def test_run_verdicts_pages_through_long_runs(tmp_path: Path) -> None:
    store = VerdictStore(tmp_path / "v.db", retention_seconds=86400, retention_count=10**6)
    store.write([(v, 12) for v in verdicts(2300, run_of=lambda i: "long")])
    got = run_verdicts(store, "long")
    assert len(got) == 2300
    assert got[0].trace_id == f"{1:032x}"  # oldest first


# -- spans from Jaeger ------------------------------------------------------------------------


def fake_jaeger(answers: dict[str, bytes]) -> FastAPI:
    """Jaeger's API v3 GetTrace route, answering recorded bodies (Jaeger cannot run here)."""
    app = FastAPI()

    @app.get("/api/v3/traces/{trace_id}")
    def get_trace(trace_id: str) -> Response:
        if trace_id not in answers:
            body = {"error": {"httpCode": 404, "message": "trace not found"}}
            return Response(json.dumps(body), status_code=404, media_type="application/json")
        return Response(answers[trace_id], media_type="application/json")

    return app


def test_spans_of_a_jaeger_api_v3_get_trace_answer(shared_fixtures: Path) -> None:
    body = (shared_fixtures / "jaeger" / "jaeger_apiv3_GetTrace.json").read_bytes()
    with ServerThread(fake_jaeger({"0" * 31 + "1": body})) as jaeger:
        source = SpanSource(None, jaeger.url)
        got = source.get("0" * 31 + "1")
        assert isinstance(got, TraceSpans)
        assert [(s.name, s.span_id, s.error) for s in got.spans] == [
            ("foobar", "0000000000000002", True)
        ]
        assert got.source.startswith(jaeger.url + "/api/v3/traces/")
        missing = source.get("ab" * 16)
        assert isinstance(missing, str)
        assert "404" in missing


def test_the_trace_page_draws_spans_fetched_from_jaeger(tmp_path: Path) -> None:
    trace_id = "cd" * 16
    spans = rag_trace(trace_id=trace_id, retrieval=30).spans
    v3 = b'{"result": ' + otlp_json(to_request(spans)) + b"}"
    with (
        ServerThread(fake_jaeger({trace_id: v3})) as jaeger,
        running_collector(tmp_path, span_retention_count=0, jaeger_url=jaeger.url) as c,
    ):
        c.post(otlp_json(to_request(spans)), "application/json")
        verdict = c.verdict(trace_id)
        page = c.client.get(f"/traces/{trace_id}").text
    assert 'id="first-token"' in page
    assert f'data-ms="{verdict["ttft_ms"]:g}"' in page
    assert f"Spans from {jaeger.url}/api/v3/traces/{trace_id}" in page


def test_without_spans_or_jaeger_the_trace_page_says_why(tmp_path: Path) -> None:
    trace_id = "ef" * 16
    with running_collector(tmp_path, span_retention_count=0) as c:
        c.post(otlp_json(to_request(rag_trace(trace_id=trace_id).spans)), "application/json")
        c.verdict(trace_id)
        response = c.client.get(f"/traces/{trace_id}")
    assert response.status_code == 200
    assert "no --jaeger-url is set" in response.text
    assert 'id="budget-table"' in response.text  # the verdict is still shown in full
