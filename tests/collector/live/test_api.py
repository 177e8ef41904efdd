"""The verdict API, the summary, Prometheus metrics with exemplars, health and the web UI."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from spanbudget.collector.core.metrics import BUDGET_BUCKETS_SECONDS
from spanbudget.collector.live.app import app_for

from tests.support.collector import (
    Collector,
    idle_pipeline,
    running_collector,
)
from tests.support.otlp import to_request
from tests.support.traces import rag_trace

PROTOBUF = "application/x-protobuf"
SHAPES = [{"retrieval": 30}, {}, {"prefill": 30}, {"prompt": 5}, {"retrieval": 12}, {}]


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    with running_collector(tmp_path_factory.mktemp("api")) as running:
        spans = []
        for n, shape in enumerate(SHAPES):
            spans += rag_trace(trace_id=f"{n + 1:032x}", **shape).spans  # type: ignore[arg-type]
        assert running.post(to_request(spans).SerializeToString(), PROTOBUF).status_code == 200
        for n in range(len(SHAPES)):
            running.verdict(f"{n + 1:032x}")
        yield running


def test_buckets_resolve_the_budget_bands() -> None:
    ms = [round(b * 1000, 6) for b in BUDGET_BUCKETS_SECONDS]
    assert [m for m in ms if m <= 60] == list(range(5, 61, 5))
    assert [m for m in ms if 60 < m <= 300] == list(range(70, 301, 10))
    assert ms == sorted(ms)
    assert ms[-1] >= 10_000


def test_metrics_in_prometheus_text(collector: Collector) -> None:
    response = collector.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    for name in (
        "spanbudget_stage_duration_seconds",
        "spanbudget_ttft_seconds",
        "spanbudget_traces",
        "spanbudget_stage_overruns",
        "spanbudget_spans_received",
        "spanbudget_traces_skipped",
        "spanbudget_spans_rejected",
        "spanbudget_traces_dropped",
        "spanbudget_spans_late",
        "spanbudget_export_failures",
    ):
        assert name in families, name
    ttft_count = next(
        s.value
        for s in families["spanbudget_ttft_seconds"].samples
        if s.name == "spanbudget_ttft_seconds_count"
    )
    assert ttft_count == len(SHAPES)
    overruns = {
        s.labels["stage"]: s.value
        for s in families["spanbudget_stage_overruns"].samples
        if s.name == "spanbudget_stage_overruns_total"
    }
    assert overruns == {"retrieval": 1.0, "prefill": 1.0}
    assert "# {" not in response.text  # no exemplars in the classic format


def test_openmetrics_carries_trace_id_exemplars(collector: Collector) -> None:
    response = collector.client.get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    exemplars = re.findall(
        r'spanbudget_stage_duration_seconds_bucket\{.*stage="retrieval"\} \d+\.\d+ '
        r'# \{trace_id="([0-9a-f]{32})"\}',
        response.text,
    )
    assert exemplars
    assert set(exemplars) <= {f"{n + 1:032x}" for n in range(len(SHAPES))}
    assert response.text.rstrip().endswith("# EOF")


def test_summary_matches_numpy_over_the_served_verdicts(collector: Collector) -> None:
    verdicts = collector.client.get("/api/verdicts", params={"limit": 1000}).json()
    summary = collector.client.get("/api/summary").json()
    assert summary["budget"] == "rag-ttft"
    assert summary["traces"] == len(verdicts) == len(SHAPES)
    for stage in summary["stages"]:
        ms = [s["ms"] for v in verdicts for s in v["stages"] if s["name"] == stage["name"]]
        for p in (50, 90, 95, 99):
            assert stage[f"p{p}_ms"] == float(np.percentile(ms, p))
    assert summary["status_counts"]["overrun"] == 2
    scoped = collector.client.get("/api/summary", params={"run_id": "nope", "since": "5m"})
    assert scoped.json()["traces"] == 0


def test_verdict_listing_and_filters(collector: Collector) -> None:
    client = collector.client
    newest = client.get("/api/verdicts", params={"limit": 2}).json()
    assert len(newest) == 2
    # `before` pages on from a verdict: the next ones, none twice, all of them in the end.
    every = [v["trace_id"] for v in client.get("/api/verdicts").json()]
    paged = [v["trace_id"] for v in newest]
    for _ in range(len(every)):  # bounded: a cursor that did not move must fail, not hang
        page = client.get("/api/verdicts", params={"limit": 2, "before": paged[-1].upper()})
        if not page.json():
            break
        paged += [v["trace_id"] for v in page.json()]
    assert paged == every
    assert client.get("/api/verdicts", params={"before": "xyz"}).status_code == 400
    overrun = client.get("/api/verdicts", params={"status": "overrun"}).json()
    assert {v["trace_id"] for v in overrun} == {f"{1:032x}", f"{3:032x}"}
    blamed = client.get("/api/verdicts", params={"stage": "retrieval"}).json()
    assert [v["trace_id"] for v in blamed] == [f"{1:032x}"]
    assert len(client.get("/api/verdicts", params={"run_id": "run-1"}).json()) == len(SHAPES)
    assert client.get("/api/verdicts", params={"since": "yesterday"}).status_code == 400
    # `since` really filters, as a duration ago and as an RFC 3339 time.
    future = "2999-01-01T00:00:00Z"
    assert client.get("/api/verdicts", params={"since": future}).json() == []
    assert len(client.get("/api/verdicts", params={"since": "10m"}).json()) == len(SHAPES)
    assert client.get("/api/summary", params={"since": future}).json()["traces"] == 0
    assert client.get("/api/summary", params={"since": "10m"}).json()["traces"] == len(SHAPES)
    assert client.get("/api/verdicts", params={"status": "fine"}).status_code == 422
    assert client.get("/api/verdicts", params={"limit": 0}).status_code == 422
    assert client.get("/api/verdicts/xyz").status_code == 400
    assert client.get(f"/api/verdicts/{'9' * 32}").status_code == 404
    upper = client.get(f"/api/verdicts/{1:032X}")  # ids are case-insensitive
    assert upper.status_code == 200


def test_web_ui_is_self_contained(collector: Collector) -> None:
    """Every page loads only what the collector serves: no CDN, nothing from elsewhere."""
    for path in ("/", "/traces", "/runs"):
        response = collector.client.get(path)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        page = response.text
        loaded = re.findall(r'<(?:script|img|iframe)[^>]* src="([^"]*)"', page)
        loaded += re.findall(r'<link[^>]* href="([^"]*)"', page)
        assert loaded, path
        for url in loaded:
            assert url.startswith(("/", "data:")), (path, url)
            if url.startswith("/"):
                assert collector.client.get(url).status_code == 200, url
        assert "@import" not in page
    for asset in ("/static/charts.css", "/static/ui.css", "/static/ui.js"):
        # The SVG namespace is a name, not an address anything loads.
        text = collector.client.get(asset).text.replace("http://www.w3.org/2000/svg", "")
        assert "http://" not in text
        assert "https://" not in text


def test_health_and_readiness(tmp_path: Path) -> None:
    pipeline = idle_pipeline(tmp_path)
    with TestClient(app_for(pipeline)) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 503  # worker not started
        pipeline.start()
        assert client.get("/readyz").status_code == 200
        pipeline.close()
        assert client.get("/readyz").status_code == 503
        body = to_request(rag_trace().spans).SerializeToString()
        refused = client.post("/v1/traces", content=body, headers={"Content-Type": PROTOBUF})
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
