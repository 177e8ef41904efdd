"""Each of the judging core's sinks on its own, fed the `Decisions` a step hands them: the
store, the metrics, the alert engine, forwarding and `BudgetSpanProcessor`'s callbacks."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry
from spanbudget.collector.alerts.budgets import BudgetAlerts
from spanbudget.collector.alerts.engine import Alert, AlertEngine, AlertSettings
from spanbudget.collector.annotations import BUDGET_STAGE, BUDGET_STATUS
from spanbudget.collector.budget.loader import BudgetNames, load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.core.decisions import DecidedTrace, Decisions
from spanbudget.collector.core.held import HeldSpan
from spanbudget.collector.core.metrics import CollectorMetrics, MetricsSink
from spanbudget.collector.core.processor import CallbackSink
from spanbudget.collector.intake.otlp import decode_export
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.sinks.alerting import AlertsSink
from spanbudget.collector.sinks.forward import Forwarder
from spanbudget.collector.sinks.store import StoreSink, VerdictStore
from spanbudget.collector.spans import Span, SpanKind

from tests.support.collector import BUDGET
from tests.support.otlp import to_request
from tests.support.traces import TraceBuilder, rag_trace

# The store's retention counts verdicts' ages from the wall clock: a fixed date would
# age out of it.
NOW = datetime.now(UTC).replace(microsecond=0)
PROTOBUF = "application/x-protobuf"


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(BUDGET).budget


def _over_otlp(spans: list[Span]) -> list[HeldSpan]:
    """Spans as the intake holds them: each with its decoded OTLP original."""
    body = to_request(spans).SerializeToString()
    batch = decode_export(
        body,
        content_type=PROTOBUF,
        content_encoding=None,
        max_body_bytes=1 << 20,
        max_span_bytes=1 << 16,
        originals=True,
    )
    return batch.spans


def _judged(budget: Budget, trace_id: str, **extra: float) -> DecidedTrace:
    held = _over_otlp(rag_trace(trace_id=trace_id, **extra).spans)
    judged = Evaluator(budget).judge([h.span for h in held], evaluated_at=NOW)
    assert judged is not None
    return DecidedTrace(trace_id, held, "complete", judged)


def _skipped(trace_id: str) -> DecidedTrace:
    builder = TraceBuilder(trace_id=trace_id)
    builder.add("GET /healthz", 0, 1, kind=SpanKind.SERVER, service="other")
    return DecidedTrace(trace_id, _over_otlp(builder.spans), "complete")


def _dropped(trace_id: str) -> DecidedTrace:
    held = _over_otlp(rag_trace(trace_id=trace_id).spans)
    return DecidedTrace(trace_id, held, "evicted", dropped="buffer_full")


def _late(trace_id: str, count: int) -> list[HeldSpan]:
    spans = rag_trace(trace_id=trace_id).spans[1 : 1 + count]
    return _over_otlp([replace(s, span_id=f"f{i:015x}") for i, s in enumerate(spans)])


def test_store_sink_writes_judged_verdicts_counts_late_spans_and_prunes(
    budget: Budget, tmp_path: Path
) -> None:
    store = VerdictStore(tmp_path / "v.db", retention_seconds=86400, retention_count=3)
    clock = [1000.0]
    sink = StoreSink(store, prune_every_s=60.0, clock=lambda: clock[0])
    a, b, c = "a" * 32, "b" * 32, "c" * 32
    sink.consume(Decisions(budget, [_judged(budget, a, retrieval=30), _skipped(b), _dropped(c)]))
    stored = store.get(a)
    assert stored is not None
    assert Verdict.from_dict(stored) == _judged(budget, a, retrieval=30).judged.verdict  # type: ignore[union-attr]
    assert stored["spans"] == 11
    assert store.get(b) is None
    assert store.get(c) is None
    sink.consume(Decisions(budget, [], _late(a, 2)))
    assert store.get(a)["late_spans"] == 2  # type: ignore[index]
    # Retention (3 verdicts) is applied once a minute, not at every step.
    sink.consume(Decisions(budget, [_judged(budget, f"{n:032x}") for n in range(1, 4)]))
    assert store.summary()["traces"] == 4
    clock[0] += 60
    sink.consume(Decisions(budget, []))
    assert store.summary()["traces"] == 3
    assert store.get(a) is None  # the oldest went first
    sink.close()
    with pytest.raises(sqlite3.ProgrammingError):
        store.summary()


def test_metrics_sink_observes_each_judged_verdict(budget: Budget) -> None:
    metrics = CollectorMetrics(CollectorRegistry())
    sink = MetricsSink(metrics)
    over = _judged(budget, "a" * 32, retrieval=30)
    sink.consume(Decisions(budget, [over, _judged(budget, "b" * 32), _skipped("c" * 32)]))
    registry = metrics.registry
    labels = {"budget": "rag-ttft"}
    assert registry.get_sample_value("spanbudget_ttft_seconds_count", labels) == 2
    assert registry.get_sample_value("spanbudget_traces_total", {**labels, "status": "ok"}) == 1
    assert (
        registry.get_sample_value("spanbudget_traces_total", {**labels, "status": "overrun"}) == 1
    )
    overruns = {**labels, "stage": "retrieval"}
    assert registry.get_sample_value("spanbudget_stage_overruns_total", overruns) == 1
    assert registry.get_sample_value("spanbudget_stage_duration_seconds_count", overruns) == 2


def test_alerts_sink_feeds_the_engine_and_hands_it_a_switched_budget(budget: Budget) -> None:
    sent: list[Alert] = []
    engine = AlertEngine(budget, sent.append, AlertSettings(min_judged=1, min_overruns=1))
    alerts = BudgetAlerts(budget, lambda _: engine, BudgetNames())
    sink = AlertsSink(alerts)
    traces = [_judged(budget, f"{n + 1:032x}", retrieval=30) for n in range(3)]
    sink.consume(Decisions(budget, [*traces, _skipped("c" * 32)]))
    retrieval = [s for s in engine.rule_states() if s.stage == "retrieval"]
    assert {s.track.long.judged for s in retrieval} == {3}
    assert {s.track.long.over for s in retrieval} == {3}
    renamed = replace(budget, name="rag-ttft-v2")
    sink.consume(Decisions(renamed, []))
    assert engine.budget is renamed
    assert alerts.budget is renamed
    assert {s.budget for s in engine.rule_states()} == {"rag-ttft-v2"}


def test_forwarder_sends_every_original_and_annotates_the_judged(budget: Budget) -> None:
    received: list[ExportTraceServiceRequest] = []

    def downstream(request: httpx.Request) -> httpx.Response:
        received.append(ExportTraceServiceRequest.FromString(request.content))
        return httpx.Response(200)

    metrics = CollectorMetrics(CollectorRegistry())
    forwarder = Forwarder(
        "http://downstream/v1/traces",
        metrics,
        max_queue_spans=1000,
        batch_spans=1000,
        timeout=5,
        backoff=0.01,
        backoff_max=0.01,
        max_elapsed=5,
        drain_seconds=5,
        client=httpx.Client(transport=httpx.MockTransport(downstream)),
    )
    judged, skipped = _judged(budget, "a" * 32, prefill=40), _skipped("b" * 32)
    in_process = HeldSpan(rag_trace(trace_id="d" * 32).spans[0])  # no OTLP original
    late = _late("e" * 32, 1)
    forwarder.consume(Decisions(budget, [judged, skipped], [*late, in_process]))
    forwarder.close()
    spans = {
        (span.trace_id.hex()[0], span.span_id.hex()): span
        for request in received
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    }
    assert len(spans) == len(judged.spans) + 1 + 1  # not the one without an original
    attributes = {key: {kv.key: kv.value for kv in s.attributes} for key, s in spans.items()}
    root, prompt = (judged.spans[0].span, judged.spans[7].span)
    assert prompt.name == "prompt.render"
    assert attributes["a", root.span_id][BUDGET_STATUS].string_value == "overrun"
    assert attributes["a", prompt.span_id][BUDGET_STAGE].string_value == "prompt"
    assert BUDGET_STATUS not in attributes["a", prompt.span_id]
    assert attributes["b", skipped.spans[0].span.span_id] == {}
    assert BUDGET_STAGE not in attributes["e", late[0].span.span_id]
    assert metrics.registry.get_sample_value("spanbudget_spans_forwarded_total") == len(spans)


def test_callback_sink_hands_out_verdicts_and_skips_and_survives_a_failing_callback(
    budget: Budget,
) -> None:
    verdicts: list[str] = []
    skipped: list[str] = []

    def on_verdict(verdict: Verdict) -> None:
        verdicts.append(verdict.trace_id)
        if len(verdicts) == 1:
            raise RuntimeError("a user's callback failed")

    sink = CallbackSink(on_verdict, skipped.append)
    a, b, c, d = "a" * 32, "b" * 32, "c" * 32, "d" * 32
    sink.consume(
        Decisions(budget, [_judged(budget, a), _skipped(b), _dropped(c), _judged(budget, d)])
    )
    assert verdicts == [a, d]
    assert skipped == [b]  # a dropped trace is not a skipped one
