"""`BudgetSpanProcessor` in a plain TracerProvider: a server whose caller is in another
process is judged once its local root ends; traffic that matches no stage is skipped; a
first token marked by an event is judged as the collector judges it."""

from __future__ import annotations

import threading
from pathlib import Path

from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.presets import preset_path
from spanbudget.collector.core.processor import BudgetSpanProcessor
from spanbudget.collector.judging.verdict import Status, Verdict

from tests.support.collector import BUDGET, comparable, running_collector

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


def test_an_event_first_token_is_judged_in_process_as_through_the_collector(
    tmp_path: Path,
) -> None:
    """OpenLLMetry marks the first token with a streamed-chunk event on the LLM span, one
    event a chunk: BudgetSpanProcessor must read it, at its earliest, as the collector's
    OTLP intake does, and come to the same verdict."""
    budget_path = preset_path("openllmetry")
    got: list[Verdict] = []
    processor = BudgetSpanProcessor(load_budget(budget_path).budget, got.append, decision_wait=0.05)
    with running_collector(tmp_path, budget_path=budget_path) as collector:
        provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(f"{collector.url}/v1/traces"))
        )
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("tests")
        root = tracer.start_span("POST /ask", kind=trace_api.SpanKind.SERVER, start_time=T0)
        inside = trace_api.set_span_in_context(root)
        search = tracer.start_span(
            "qdrant.search",
            context=inside,
            kind=trace_api.SpanKind.CLIENT,
            attributes={"db.system": "Qdrant"},
            start_time=T0 + 5 * MS,
        )
        search.end(T0 + 40 * MS)
        chat = tracer.start_span(
            "openai.chat",
            context=inside,
            kind=trace_api.SpanKind.CLIENT,
            attributes={"gen_ai.operation.name": "chat", "llm.request.type": "chat"},
            start_time=T0 + 45 * MS,
        )
        for at_ms in (230, 200, 215):  # one event a chunk; the first is the first token
            chat.add_event("gen_ai.content.completion.chunk", timestamp=T0 + at_ms * MS)
        chat.end(T0 + 290 * MS)
        root.end(T0 + 300 * MS)
        trace_id = format(root.get_span_context().trace_id, "032x")
        served = collector.verdict(trace_id)
        provider.shutdown()
    assert served["ttft_ms"] == 200.0
    assert len(got) == 1
    assert comparable(got[0].to_dict()) == comparable(served)
