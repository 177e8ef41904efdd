"""Each library is recognised by what its spans carry, one trace at a time; the reference
path's own spans (vLLM's `llm_request` among them) by none, so the budget in effect judges
them. What each library emits is taken from its real spans (tests/collector/budget/presets/)."""

from __future__ import annotations

import pytest
from spanbudget.collector.budget.recognize import Instrumentation, recognize
from spanbudget.collector.spans import SpanKind

from tests.support.traces import TraceBuilder, rag_trace


def one_span(**kwargs: object) -> TraceBuilder:
    trace = TraceBuilder()
    trace.add("handle question", 0, 100, service="app")
    trace.add("span", 10, 90, parent=trace.spans[0].span_id, service="app", **kwargs)  # type: ignore[arg-type]
    return trace


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"attributes": {"openinference.span.kind": "LLM"}}, Instrumentation.OPENINFERENCE),
        ({"scope": "openinference.instrumentation.langchain"}, Instrumentation.OPENINFERENCE),
        ({"scope": "opentelemetry.instrumentation.openai.v1"}, Instrumentation.OPENLLMETRY),
        ({"events": {"gen_ai.content.completion.chunk": 20}}, Instrumentation.OPENLLMETRY),
        ({"attributes": {"gen_ai.is_streaming": True}}, Instrumentation.OPENLLMETRY),
        ({"attributes": {"traceloop.span.kind": "task"}}, Instrumentation.OPENLLMETRY),
        ({"scope": "openlit.instrumentation.openai"}, Instrumentation.OPENLIT),
        ({"attributes": {"gen_ai.server.time_to_first_token": 0.1}}, Instrumentation.OPENLIT),
        ({"attributes": {"telemetry.sdk.name": "openlit"}}, Instrumentation.OPENLIT),
        ({"scope": "opentelemetry.util.genai.handler"}, Instrumentation.GENAI),
        ({"scope": "opentelemetry.instrumentation.openai_v2"}, Instrumentation.GENAI),
        ({"attributes": {"gen_ai.operation.name": "chat"}}, None),  # anyone's: no library
        ({"scope": "opentelemetry.instrumentation.httpx"}, None),
    ],
)
def test_each_library_by_its_own_marks(kwargs: dict[str, object], expected: object) -> None:
    assert recognize(one_span(**kwargs).spans) is expected


def test_the_reference_path_is_no_library_though_vllm_is_in_it() -> None:
    assert recognize(rag_trace().spans) is None
    assert recognize(rag_trace(client_root=False).spans) is None


def test_vllm_alone_by_its_version() -> None:
    trace = TraceBuilder()
    v1 = {"gen_ai.latency.time_to_first_token": 0.1, "gen_ai.latency.time_in_model_prefill": 0.05}
    trace.add("llm_request", 0, 200, kind=SpanKind.SERVER, service="vllm", attributes=v1)
    assert recognize(trace.spans) is Instrumentation.VLLM
    v0 = TraceBuilder()
    v0.add("llm_request", 0, 200, kind=SpanKind.SERVER, service="vllm", attributes={})
    assert recognize(v0.spans) is Instrumentation.VLLM_V0
    assert recognize([]) is None


def test_a_library_wins_over_the_engine_it_called() -> None:
    """OpenLLMetry passes the trace context on: vLLM's span is in the app's trace."""
    trace = one_span(events={"gen_ai.content.completion.chunk": 20})
    trace.add("llm_request", 12, 80, parent=trace.spans[1].span_id, kind=SpanKind.SERVER)
    assert recognize(trace.spans) is Instrumentation.OPENLLMETRY
    assert Instrumentation.OPENLLMETRY.preset == "openllmetry"
