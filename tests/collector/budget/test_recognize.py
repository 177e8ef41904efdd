"""Each library is recognised by what its spans carry, one trace at a time; the reference
path's own spans (vLLM's `llm_request` among them) by none, so the budget in effect judges
them. What each library emits is taken from its real spans (tests/collector/budget/presets/).
The compiled recognition the collector runs (`_judge.recognize`) answers each case alike, and
every random mix of marks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spanbudget.collector.budget.recognize import Instrumentation, recognize
from spanbudget.collector.judging.evaluate import COMPILED
from spanbudget.collector.readers.span_records import AttributeKeys, SpanReader
from spanbudget.collector.spans import Span, SpanEvent, SpanKind

from tests.support.otlp import to_request
from tests.support.traces import TraceBuilder, rag_trace

Recognizer = Callable[[Sequence[Span]], Instrumentation | None]
RECOGNIZERS: list[Recognizer] = [recognize]
if COMPILED:
    from spanbudget.collector.judging._judge import recognize as compiled_recognize

    RECOGNIZERS.append(compiled_recognize)


@pytest.fixture(params=RECOGNIZERS, ids=["python", "compiled"][: len(RECOGNIZERS)])
def recognizer(request: pytest.FixtureRequest) -> Recognizer:
    return request.param  # type: ignore[no-any-return]


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
def test_each_library_by_its_own_marks(
    kwargs: dict[str, object], expected: object, recognizer: Recognizer
) -> None:
    assert recognizer(one_span(**kwargs).spans) is expected


def test_the_reference_path_is_no_library_though_vllm_is_in_it(recognizer: Recognizer) -> None:
    assert recognizer(rag_trace().spans) is None
    assert recognizer(rag_trace(client_root=False).spans) is None


def test_vllm_alone_by_its_version(recognizer: Recognizer) -> None:
    trace = TraceBuilder()
    v1 = {"gen_ai.latency.time_to_first_token": 0.1, "gen_ai.latency.time_in_model_prefill": 0.05}
    trace.add("llm_request", 0, 200, kind=SpanKind.SERVER, service="vllm", attributes=v1)
    assert recognizer(trace.spans) is Instrumentation.VLLM
    v0 = TraceBuilder()
    v0.add("llm_request", 0, 200, kind=SpanKind.SERVER, service="vllm", attributes={})
    assert recognizer(v0.spans) is Instrumentation.VLLM_V0
    assert recognizer([]) is None


def test_a_library_wins_over_the_engine_it_called(recognizer: Recognizer) -> None:
    """OpenLLMetry passes the trace context on: vLLM's span is in the app's trace."""
    trace = one_span(events={"gen_ai.content.completion.chunk": 20})
    trace.add("llm_request", 12, 80, parent=trace.spans[1].span_id, kind=SpanKind.SERVER)
    assert recognizer(trace.spans) is Instrumentation.OPENLLMETRY
    assert Instrumentation.OPENLLMETRY.preset == "openllmetry"


# Marks of every library, near misses, and values of other types.
SCOPES = [
    None,
    "",
    "openinference.instrumentation.openai",
    "opentelemetry.instrumentation.openai.v1",
    "opentelemetry.instrumentation.openai",
    "traceloop.sdk",
    "openlit.otel",
    "opentelemetry.util.genai.handler",
    "opentelemetry.instrumentation.httpx",
]
ATTRIBUTES = {
    "openinference.span.kind": ["LLM", 1],
    "gen_ai.is_streaming": [True],
    "traceloop.entity.name": ["x"],
    "llm.request.type": ["chat"],
    "gen_ai.server.time_to_first_token": [0.1],
    "telemetry.sdk.name": ["openlit", "opentelemetry", 3],
    "gen_ai.latency.time_in_model_prefill": [0.05],
}
EVENTS = ["gen_ai.content.completion.chunk", "First Token Stream Event", "other"]
NAMES = ["llm_request", "vllm_queue", "vllm_prefill", "vllm_decode", "chat", "POST"]


@st.composite
def marked_spans(draw: st.DrawFn) -> list[Span]:
    spans = []
    for i in range(draw(st.integers(0, 6))):
        # Up to every key: fewer than the keys recognition looks for, and as many or more.
        keys = draw(st.lists(st.sampled_from(sorted(ATTRIBUTES)), unique=True))
        names = draw(st.lists(st.sampled_from(EVENTS), unique=True, max_size=2))
        spans.append(
            Span(
                "1" * 32,
                f"{i + 1:016x}",
                draw(st.sampled_from(NAMES)),
                0,
                10,
                attributes={key: draw(st.sampled_from(ATTRIBUTES[key])) for key in keys},
                events=tuple(SpanEvent(name, 5) for name in names),
                scope=draw(st.sampled_from(SCOPES)),
            )
        )
    return spans


@pytest.mark.skipif(not COMPILED, reason="the compiled path is not built")
@settings(max_examples=400, deadline=None)
@given(marked_spans())
def test_the_compiled_recognition_is_the_pythons(spans: list[Span]) -> None:
    """On the spans as given (dict attributes) and as the wire reader makes them."""
    assert RECOGNIZERS[1](spans) is recognize(spans)
    if spans:
        body = to_request(spans).SerializeToString()
        read = SpanReader(AttributeKeys(every=True), compiled=True).read(body, "t").to_spans()
        assert RECOGNIZERS[1](read) is recognize(read) is recognize(spans)
