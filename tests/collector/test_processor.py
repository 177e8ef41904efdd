"""`BudgetSpanProcessor` in a plain TracerProvider: a server whose caller is in another
process is judged once its local root ends; traffic that matches no stage is skipped."""

from __future__ import annotations

import threading

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from spanbudget.collector.budget_file import load_budget
from spanbudget.collector.live.processor import BudgetSpanProcessor
from spanbudget.collector.verdict import Status, Verdict
from tests.collector.harness import BUDGET

MS = 1_000_000
T0 = 1_760_000_000_000_000_000


def test_remote_parent_server_trace_is_judged_and_health_checks_skipped() -> None:
    verdicts: list[Verdict] = []
    skipped: list[str] = []
    done = threading.Event()

    def on_verdict(verdict: Verdict) -> None:
        verdicts.append(verdict)
        done.set()

    processor = BudgetSpanProcessor(
        load_budget(BUDGET).budget, on_verdict, on_skipped=skipped.append, decision_wait=0.05
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-gateway"}))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    caller = trace_api.SpanContext(
        trace_id=0xABC,
        span_id=0xDEF,
        is_remote=True,
        trace_flags=trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED),
    )
    server = tracer.start_span(
        "POST /v1/chat/completions",
        context=trace_api.set_span_in_context(trace_api.NonRecordingSpan(caller)),
        kind=trace_api.SpanKind.SERVER,
        start_time=T0,
        attributes={"gen_ai.response.time_to_first_chunk": 0.1},
    )
    inside = trace_api.set_span_in_context(server)
    for name, start, end in (("auth.verify", 1, 4), ("prompt.render", 5, 30)):
        tracer.start_span(name, context=inside, start_time=T0 + start * MS).end(T0 + end * MS)
    server.end(T0 + 120 * MS)
    tracer.start_span("GET /healthz", start_time=T0).end(T0 + MS)

    assert done.wait(10), "no verdict from the processor"
    provider.shutdown()
    (verdict,) = verdicts
    assert verdict.trace_id == f"{0xABC:032x}"
    assert verdict.ttft_ms == 100.0
    assert verdict.stage("network").status is Status.UNMEASURED
    assert verdict.stage("prompt").ms == 25.0
    assert verdict.status is Status.OVERRUN  # prompt 25 ms > its 20 ms limit
    assert len(skipped) == 1
