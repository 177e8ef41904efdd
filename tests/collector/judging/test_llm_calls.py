"""The request a trace was, as the evaluator settles its verdict: only a streamed LLM call
is judged on time to first token; a trace with no LLM call is `not_applicable`, one whose
calls were not streamed `not_streamed` (or judged whole, when the budget says so); an
`incomplete` trace blames nothing; the model and tokens are the first token's LLM call's;
the first token names its source; a span whose parent is missing marks the verdict
damaged but is judged all the same (DESIGN §5 rule 1). On both evaluator paths, whose
walks over a trace's calls (`scan`, `calls_below`), reading of the request and settling of
the verdict are held equal on random traces."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spanbudget.collector.budget.loader import load_budget, load_preset
from spanbudget.collector.budget.model import Budget, NonStreamed
from spanbudget.collector.judging.evaluate import COMPILED, Evaluator, Judged
from spanbudget.collector.judging.llm_calls import (
    call_attributes,
    calls_below,
    read_request,
    reading,
    settle,
    streamed,
)
from spanbudget.collector.judging.verdict import Status, Verdict
from spanbudget.collector.readers.span_records import AttributeKeys, SpanReader
from spanbudget.collector.spans import AttrValue, Span, SpanEvent, SpanKind

from tests.support.layout import REPO
from tests.support.otlp import to_request
from tests.support.traces import TraceBuilder, openlit_stream_without_http_child, rag_trace

NOW = datetime(2026, 12, 7, tzinfo=UTC)
OPENLLMETRY = load_preset("openllmetry").budget
GENAI = load_preset("genai").budget
OPENLIT = load_preset("openlit").budget
REFERENCE = load_budget(REPO / "budget.yaml").budget
CHUNK = "gen_ai.content.completion.chunk"
PATHS = [True, False] if COMPILED else [False]


def judged(budget: Budget, spans: list[Span]) -> Verdict:
    """The verdict, the same on both paths."""
    verdicts = [
        Evaluator(budget, compiled=compiled).evaluate(spans, evaluated_at=NOW) for compiled in PATHS
    ]
    assert verdicts[0] is not None
    assert all(v == verdicts[0] for v in verdicts)
    return verdicts[0]


def openllmetry_app(*, stream: bool = True, chunk_ms: float | None = 50.0) -> TraceBuilder:
    """An app's root span, an embeddings call, then a chat call, as OpenLLMetry traces
    them; vLLM's span under the chat (the context passed on)."""
    trace = TraceBuilder()
    root = trace.add("handle question", 0, 300, service="app")
    trace.add(
        "openai.embeddings", 2, 12, parent=root, kind=SpanKind.CLIENT, service="app",
        attributes={
            "gen_ai.operation.name": "embeddings", "gen_ai.request.model": "embed-small",
            "gen_ai.usage.input_tokens": 4, "gen_ai.is_streaming": False,
        },
    )  # fmt: skip
    chat = trace.add(
        "openai.chat", 15, 280, parent=root, kind=SpanKind.CLIENT, service="app",
        attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "chat-large",
            "gen_ai.usage.input_tokens": 26, "gen_ai.usage.output_tokens": 8,
            "gen_ai.is_streaming": stream,
        },
        events={CHUNK: chunk_ms} if chunk_ms is not None else None,
    )  # fmt: skip
    trace.add(
        "llm_request", 20, 270, parent=chat, kind=SpanKind.SERVER, service="vllm",
        attributes={
            "gen_ai.latency.time_to_first_token": 0.025,
            "gen_ai.latency.time_in_queue": 0.001,
            "gen_ai.latency.time_in_model_prefill": 0.02,
            "gen_ai.usage.prompt_tokens": 26,
        },
    )  # fmt: skip
    return trace


def test_a_streamed_call_is_judged_with_its_own_model_and_tokens() -> None:
    """Not the embeddings call's, which names a model and tokens first."""
    verdict = judged(OPENLLMETRY, openllmetry_app().spans)
    assert verdict.status is not Status.INCOMPLETE
    assert verdict.ttft_ms == 50.0
    assert verdict.attributes["gen_ai.request.model"] == "chat-large"
    assert verdict.attributes["gen_ai.usage.input_tokens"] == 26
    assert verdict.attributes["gen_ai.usage.output_tokens"] == 8
    assert verdict.first_token == {
        "source": "event",
        "mark": f"event {CHUNK} or llm.content.completion.chunk",
        "span": "openai.chat",
        "exact": True,
    }
    assert verdict.to_dict()["first_token"]["source"] == "event"


def test_a_call_not_streamed_is_left_out_with_its_response_time() -> None:
    """vLLM's own first token is in the trace, but the app got the answer whole."""
    spans = openllmetry_app(stream=False, chunk_ms=None).spans
    verdict = judged(OPENLLMETRY, spans)
    assert verdict.status is Status.NOT_STREAMED
    assert not verdict.status.in_slo
    assert verdict.ttft_ms is None
    assert verdict.response_ms == 280.0  # the chat call's end
    assert verdict.blame == ()
    assert verdict.overrun_ms == 0
    assert verdict.attributes["gen_ai.request.model"] == "chat-large"
    # Judged whole when the budget says so: the call's end is its first token.
    whole = judged(replace(OPENLLMETRY, non_streamed=NonStreamed.JUDGE), spans)
    assert whole.status in (Status.OK, Status.WARN, Status.OVERRUN)
    assert whole.ttft_ms == 280.0
    assert whole.first_token is not None
    assert whole.first_token["source"] == "response end"


def test_a_trace_with_no_llm_call_is_not_applicable() -> None:
    """A model list, as OpenLIT's httpx instrumentor traces it: a root GET, nothing else."""
    trace = TraceBuilder()
    trace.add(
        "GET", 0, 4, kind=SpanKind.CLIENT, service="app",
        attributes={"http.method": "GET", "http.url": "http://127.0.0.1/v1/models"},
    )  # fmt: skip
    verdict = judged(OPENLIT, trace.spans)
    assert verdict.status is Status.NOT_APPLICABLE
    assert verdict.ttft_ms is None
    assert verdict.blame == ()
    assert verdict.total_status is Status.NOT_APPLICABLE


def test_incomplete_blames_nothing() -> None:
    """No mark: the stages' times are measured to the root's end, past any window; none
    is above ok, nothing is blamed, nothing overran (they would be: 2 s of llm)."""
    trace = TraceBuilder()
    root = trace.add("handle question", 0, 2500, service="app")
    trace.add(
        "openai.chat", 5, 2400, parent=root, kind=SpanKind.CLIENT, service="app",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.is_streaming": True},
    )  # fmt: skip
    verdict = judged(OPENLLMETRY, trace.spans)
    assert verdict.status is Status.INCOMPLETE
    assert verdict.status.in_slo  # a streamed request that lost its first token
    assert verdict.stage("llm").ms is not None
    assert verdict.stage("llm").ms > verdict.stage("llm").limit_ms
    assert all(stage.status.severity <= 0 for stage in verdict.stages)
    assert verdict.blame == ()
    assert verdict.overrun_ms == 0


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"gen_ai.request.stream": True}, True),
        ({"gen_ai.request.stream": False}, False),
        ({"gen_ai.is_streaming": "true"}, True),
        ({"llm.invocation_parameters": '{"model": "m", "stream": true}'}, True),
        ({"llm.invocation_parameters": '{"model": "m"}'}, False),  # OpenInference's way
        ({"llm.invocation_parameters": "not json"}, None),
        ({}, None),
    ],
)
def test_what_a_calls_attributes_say_of_streaming(
    attributes: dict[str, object], expected: bool | None
) -> None:
    span = Span("0" * 32, "1" * 16, "chat", 0, 1, attributes=attributes)  # type: ignore[arg-type]
    assert streamed(span) is expected


def genai_app(body_sends: int) -> TraceBuilder:
    """OpenTelemetry's openai-v2 (no stream flag, no mark), its context passed to a server
    traced by the FastAPI instrumentation: `http send` spans per message sent."""
    trace = TraceBuilder()
    root = trace.add("handle question", 0, 200, service="app")
    chat = trace.add(
        "chat m", 5, 190, parent=root, kind=SpanKind.CLIENT, service="app",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"},
        scope="opentelemetry.util.genai.handler",
    )  # fmt: skip
    server = trace.add(
        "POST /v1/chat/completions", 8, 185, parent=chat, kind=SpanKind.SERVER, service="llm"
    )
    trace.add(
        "POST /v1/chat/completions http send", 20, 20.1, parent=server, service="llm",
        attributes={"asgi.event.type": "http.response.start"},
    )  # fmt: skip
    for i in range(body_sends):
        at = 60 + i * 10
        trace.add(
            "POST /v1/chat/completions http send", at, at + 0.1, parent=server, service="llm",
            attributes={"asgi.event.type": "http.response.body"},
        )  # fmt: skip
    return trace


def test_the_servers_first_body_send_is_the_first_token_where_nothing_else_is() -> None:
    verdict = judged(GENAI, genai_app(body_sends=6).spans)
    assert verdict.ttft_ms == 60.0
    assert verdict.first_token == {
        "source": "first child",
        "mark": GENAI.first_token[-1].describe(),
        "span": "POST /v1/chat/completions",
        "exact": True,
    }
    assert verdict.attributes["gen_ai.request.model"] == "m"
    # One body message: the response came whole, whatever the client's span says.
    whole = judged(GENAI, genai_app(body_sends=1).spans)
    assert whole.status is Status.NOT_STREAMED
    assert whole.response_ms == 190.0


def server_call(trace: TraceBuilder, parent: object, at: float, body_sends: int) -> None:
    """A chat call from the app, its server's span and `body_sends` response-body sends."""
    chat = trace.add(
        "chat m", at, at + 80, parent=parent, kind=SpanKind.CLIENT, service="app",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"},
    )  # fmt: skip
    server = trace.add(
        "POST /v1/chat/completions", at + 2, at + 78, parent=chat, kind=SpanKind.SERVER,
        service="llm",
    )  # fmt: skip
    for i in range(body_sends):
        send = at + 40 + i * 5
        trace.add(
            "POST /v1/chat/completions http send", send, send + 0.01, parent=server,
            service="llm", attributes={"asgi.event.type": "http.response.body"},
        )  # fmt: skip


def test_a_call_answered_whole_before_a_stream_is_not_its_first_token() -> None:
    # The first call's server sends its whole answer in one body message at 45 ms; the
    # stream's first chunk leaves at 135 ms. Both server spans sit at the same depth, and
    # the earlier one would win if one send counted as a first token.
    trace = TraceBuilder()
    root = trace.add("handle question", 0, 200, service="app")
    server_call(trace, root, 5, body_sends=1)
    server_call(trace, root, 95, body_sends=4)
    verdict = judged(GENAI, trace.spans)
    assert verdict.ttft_ms == 135.0
    assert verdict.first_token is not None
    assert verdict.first_token["source"] == "first child"


def test_a_servers_own_trace_is_not_judged_as_a_request() -> None:
    # The server's own trace (the app passed no context), with the preset pinned: one body
    # send is no first token, and a trace with no LLM call and no first token has nothing
    # to judge.
    trace = TraceBuilder()
    server = trace.add("POST /v1/chat/completions", 0, 80, kind=SpanKind.SERVER, service="llm")
    trace.add(
        "POST /v1/chat/completions http send", 70, 70.01, parent=server, service="llm",
        attributes={"asgi.event.type": "http.response.body"},
    )  # fmt: skip
    assert judged(GENAI, trace.spans).status is Status.NOT_APPLICABLE
    # Streamed, it is the same request the app's own trace holds, with the call in it:
    # judged there, not twice.
    for at in (72, 74):
        trace.add(
            "POST /v1/chat/completions http send", at, at + 0.01, parent=server, service="llm",
            attributes={"asgi.event.type": "http.response.body"},
        )  # fmt: skip
    streamed = judged(GENAI, trace.spans)
    assert streamed.status is Status.NOT_APPLICABLE
    assert streamed.ttft_ms is None


def test_a_server_beside_a_silent_call_that_answered_whole_says_not_streamed() -> None:
    # A LangChain chain passes its workflow span's context to the server, so the server's
    # span is the call's sibling, not its child; the call says nothing of streaming, and
    # the server's one body send says the answer came whole.
    trace = TraceBuilder()
    root = trace.add("handle question", 0, 120, service="app")
    workflow = trace.add("RunnableSequence.workflow", 2, 118, parent=root, service="app")
    trace.add(
        "ChatOpenAI.chat", 20, 117, parent=workflow, kind=SpanKind.CLIENT, service="app",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"},
    )  # fmt: skip
    server = trace.add(
        "POST /v1/chat/completions", 25, 112, parent=workflow, kind=SpanKind.SERVER,
        service="llm",
    )  # fmt: skip
    trace.add(
        "POST /v1/chat/completions http send", 111, 111.01, parent=server, service="llm",
        attributes={"asgi.event.type": "http.response.body"},
    )  # fmt: skip
    verdict = judged(GENAI, trace.spans)
    assert verdict.status is Status.NOT_STREAMED
    assert verdict.response_ms == 117.0


def test_openlits_value_without_its_http_child_is_an_estimate() -> None:
    trace = openlit_stream_without_http_child()
    verdict = judged(OPENLIT, trace.spans)
    assert verdict.ttft_ms == 45.0
    assert verdict.first_token is not None
    assert verdict.first_token["exact"] is False
    assert verdict.first_token["source"] == "attribute"


def test_a_missing_parent_is_judged_as_a_child_of_the_root_and_marked() -> None:
    budget = load_budget(REPO / "budget.yaml").budget
    whole = rag_trace().spans
    retrieval = next(s for s in whole if s.name.startswith("retrieval"))
    orphaned = [
        replace(s, parent_span_id="ffffffffffffffff") if s is retrieval else s for s in whole
    ]
    verdict = judged(budget, orphaned)
    assert verdict.damaged == {"missing_parent": 1}
    # Judged all the same: its time under the root, beside the gateway's span, is the
    # gateway's own now (the span that would have held it is not there to say).
    assert verdict.status is not Status.INCOMPLETE
    assert verdict.ttft_ms == judged(budget, whole).ttft_ms
    assert verdict.stage("retrieval").ms == 0
    assert judged(budget, whole).damaged is None


# What the walks look at, each with values that make a span a call, values that do not,
# and values of the wrong type.
CALL_ATTRIBUTES: dict[str, list[AttrValue]] = {
    "loadtest.run_id": ["run-1"],  # carried into the verdict from the root
    "gen_ai.operation.name": ["chat", "text_completion", "embeddings", 7, ["chat"], ""],
    "openinference.span.kind": ["LLM", "CHAIN", 1],
    "llm.model_name": ["qwen", "", 3],
    "gen_ai.request.model": ["qwen", True],
    "llm.request.type": ["chat", "completion", "rerank"],
    "asgi.event.type": ["http.response.body", "http.response.start"],
    "gen_ai.response.time_to_first_chunk": [0.1, "x"],
    "gen_ai.latency.time_to_first_token": [0.05],
    "gen_ai.request.stream": [True, "false", "maybe", 1],
    "gen_ai.is_streaming": [False],
    "llm.invocation_parameters": ['{"stream": true}', "{}", "[1]", "not json"],
    "gen_ai.response.model": ["qwen-2", ""],
    "gen_ai.usage.input_tokens": [12, -1, True, "12"],
    "gen_ai.usage.prompt_tokens": [0, 2**40],
    "llm.token_count.completion": [5, 1.5],
    "gen_ai.usage.output_tokens": [7],
}


def call_span(draw: st.DrawFn, i: int, span_id: str, parents: list[str], keys: list[str]) -> Span:
    """Span `i` of a trace: named, attributed (from `keys`) and with events as an LLM call,
    a mark, a server's send or none of them; its parent none or one of `parents`."""
    chosen = draw(st.lists(st.sampled_from(keys), unique=True, max_size=6))
    return Span(
        "1" * 32,
        span_id,
        draw(st.sampled_from(["llm_request", "chat", "POST", "other"])),
        i,
        draw(st.sampled_from([i + 10, 20])),  # some end together
        parent_span_id=draw(st.none() | st.sampled_from(parents)),
        kind=draw(st.sampled_from([SpanKind.SERVER, SpanKind.CLIENT])),
        attributes={key: draw(st.sampled_from(CALL_ATTRIBUTES[key])) for key in chosen},
        events=draw(st.sampled_from([(), (SpanEvent(CHUNK, 5),), (SpanEvent("other", 5),)])),
    )


@st.composite
def call_traces(draw: st.DrawFn) -> list[Span]:
    """Spans named and attributed as LLM calls, marks, servers' sends or none of them, with
    ids that repeat and parents that are missing, their own or in a cycle."""
    count = draw(st.integers(1, 9))
    ids = [f"{i + 1:016x}" for i in range(count + 2)]
    keys = sorted(CALL_ATTRIBUTES)
    return [
        call_span(draw, i, draw(st.sampled_from(ids[: i + 1] + ids[-1:])), ids, keys)
        for i in range(count)
    ]


# What tells whether the calls streamed: a trace without any is read by the judge itself.
TELLING = (
    "asgi.event.type",
    "gen_ai.request.stream",
    "gen_ai.is_streaming",
    "llm.invocation_parameters",
)


@st.composite
def quiet_call_traces(draw: st.DrawFn) -> list[Span]:
    """`call_traces` whose ids are unique, none its own parent, and whose calls do not
    tell whether they streamed: the traces the compiled judge reads the calls of itself."""
    count = draw(st.integers(1, 9))
    ids = draw(st.permutations([f"{i + 1:016x}" for i in range(count + 1)]))  # any order
    quiet = sorted(key for key in CALL_ATTRIBUTES if key not in TELLING)
    return [
        call_span(draw, i, ids[i], [other for n, other in enumerate(ids) if n != i], quiet)
        for i in range(count)
    ]


@pytest.mark.skipif(not COMPILED, reason="the compiled path is not built")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(quiet_call_traces(), st.sampled_from([OPENLLMETRY, OPENLIT, GENAI, REFERENCE]))
def test_the_judge_reads_quiet_calls_as_read_request_does(
    spans: list[Span], budget: Budget
) -> None:
    """Each trace the compiled judge judges whose calls do not tell whether they
    streamed, it reads itself (`judge_reading`), as `read_request` does: which calls,
    the last to end (ties by span id), the call the first token came from, what it and
    the calls below it name, the missing parents."""
    fast = Evaluator(budget, compiled=True)._compiled
    assert fast is not None
    body = to_request(spans).SerializeToString()
    read = SpanReader(AttributeKeys(every=True), compiled=True).read(body, "test").to_spans()
    for trace in (spans, read):
        judged, request = fast.judge_reading(trace, NOW)
        if not isinstance(judged, Judged):
            assert request is None
            continue
        assert request is not None
        expected = read_request(trace, judged.first_token_span, budget.first_token)
        assert request == expected
        assert list(map(type, request.attributes.values())) == list(
            map(type, expected.attributes.values())
        )


@pytest.mark.skipif(not COMPILED, reason="the compiled path is not built")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call_traces(), st.sampled_from([OPENLLMETRY, OPENLIT, GENAI]))
def test_the_compiled_readings_of_the_calls_are_the_pythons(
    spans: list[Span], budget: Budget
) -> None:
    from spanbudget.collector.judging import _judge

    python, compiled = reading(budget.first_token), reading(budget.first_token, _judge)
    # As given (dict attributes) and as the wire reader makes them (compact attributes).
    body = to_request(spans).SerializeToString()
    read = SpanReader(AttributeKeys(every=True), compiled=True).read(body, "test").to_spans()
    for trace in (spans, read):
        expected, got = python.scan(trace), compiled.scan(trace)
        assert got[3] == expected[3]  # the calls' ids
        assert list(map(id, got[4])) == list(map(id, expected[4]))  # the outermost calls
        assert got[5:] == expected[5:]  # whether anything tells of streaming; orphans
        assert {k: id(v) for k, v in got[0].items()} == {k: id(v) for k, v in expected[0].items()}
        assert {k: list(map(id, v)) for k, v in got[1].items()} == {
            k: list(map(id, v)) for k, v in expected[1].items()
        }
        assert list(map(id, got[2])) == list(map(id, expected[2]))
        ids = {call.span_id for call in expected[2]}
        for span in trace:
            below = compiled.calls_below(span, ids, expected[1])
            assert list(map(id, below)) == list(map(id, calls_below(span, ids, expected[1])))
            got_attributes = compiled.call_attributes(span, below)
            assert got_attributes == call_attributes(span, below)
            assert list(map(type, got_attributes.values())) == list(
                map(type, call_attributes(span, below).values())
            )


@pytest.mark.skipif(not COMPILED, reason="the compiled path is not built")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(call_traces(), st.sampled_from([OPENLLMETRY, OPENLIT, GENAI, REFERENCE]))
def test_the_compiled_request_and_settling_are_the_pythons(
    spans: list[Span], budget: Budget
) -> None:
    """`CompiledJudge.read` is `read_request` for every span as the first token's carrier
    (and none); `CompiledJudge.settle`, where it settles, is `settle`; and the two paths
    judge alike, as the wire reader's spans too."""
    python, compiled = Evaluator(budget, compiled=False), Evaluator(budget, compiled=True)
    fast = compiled._compiled
    assert fast is not None
    body = to_request(spans).SerializeToString()
    read = SpanReader(AttributeKeys(every=True), compiled=True).read(body, "test").to_spans()
    for trace in (spans, read):
        for carrier in [None, *sorted({span.span_id for span in trace})]:
            expected = read_request(trace, carrier, budget.first_token)
            got = fast.read(trace, carrier)
            assert got == expected
            assert list(map(type, got.attributes.values())) == list(
                map(type, expected.attributes.values())
            )
        judgement = python.judge(trace, evaluated_at=NOW, keep_tree=True)
        assert compiled.judge(trace, evaluated_at=NOW) == replace_tree(judgement)
        judged, reading_too = fast.judge_reading(trace, NOW)
        assert judged == fast.judge(trace, NOW)
        if reading_too is not None:  # read over the judge's own index: as `read_request`
            assert isinstance(judged, Judged)
            expected = read_request(trace, judged.first_token_span, budget.first_token)
            assert reading_too == expected
            assert list(map(type, reading_too.attributes.values())) == list(
                map(type, expected.attributes.values())
            )
        if judgement is None:
            continue
        request = read_request(trace, judgement.first_token_span, budget.first_token)
        for instrumentation in (None, "openlit"):
            settled = fast.settle(judgement, request, trace, instrumentation)
            if settled is None:
                continue
            verdict = settle(
                judgement.verdict,
                request,
                budget,
                first_token=python._source(judgement, trace),
                window_start_ns=0,  # read only where a call answered whole: not settled here
                instrumentation=instrumentation,
            )
            assert settled == replace(judgement, verdict=verdict)
            assert settled.verdict.to_dict() == verdict.to_dict()
            assert list(settled.verdict.attributes) == list(verdict.attributes)  # in order


def replace_tree(judgement: Judged | None) -> Judged | None:
    """The tree's judgement without the tree."""
    if judgement is None or judgement.tree is None:
        return judgement
    judgement.tree.release()
    return replace(judgement, tree=None)


@pytest.mark.skipif(not COMPILED, reason="the compiled path is not built")
def test_the_judge_reads_the_calls_of_most_traces_itself() -> None:
    """The reference path's trace and an OpenLLMetry one: the compiled judge reads their
    calls over its own index, as `read_request` does; spans with a repeated id, or whose
    calls tell whether they streamed, are left to `read` (None)."""
    reference = rag_trace(trace_id="ab" * 16).spans
    openllmetry = TraceBuilder("cd" * 16)
    openllmetry.add("workflow", 0, 400)
    openllmetry.add(
        "openai.chat",
        10,
        390,
        parent=openllmetry.spans[0].span_id,
        attributes={"llm.request.type": "chat", "gen_ai.request.model": "gpt-4o"},
    )
    for budget, spans in ((REFERENCE, reference), (OPENLLMETRY, openllmetry.spans)):
        fast = Evaluator(budget, compiled=True)._compiled
        assert fast is not None
        judged, request = fast.judge_reading(spans, NOW)
        assert isinstance(judged, Judged)
        assert request is not None
        assert request.calls > 0
        assert request == read_request(spans, judged.first_token_span, budget.first_token)
        repeated = [*spans, spans[-1]]
        assert fast.judge_reading(repeated, NOW)[1] is None
    chat = openllmetry.spans[1]
    told = replace(chat, attributes={**chat.attributes, "gen_ai.is_streaming": True})
    streaming = [openllmetry.spans[0], told]
    fast = Evaluator(OPENLLMETRY, compiled=True)._compiled
    assert fast is not None
    judged, request = fast.judge_reading(streaming, NOW)
    assert isinstance(judged, Judged)
    assert request is None


@pytest.mark.skipif(not COMPILED, reason="the compiled path is not built")
def test_the_compiled_request_picks_the_calls_the_python_picks() -> None:
    """Two calls tied on end and span id: the first is the last to end (as `max` keeps
    it); nested calls under a first token: the outermost is the call it came from."""
    fast = Evaluator(GENAI, compiled=True)._compiled
    assert fast is not None

    def call(span_id: str, model: str, end: int, parent: str | None = None) -> Span:
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
        return Span("1" * 32, span_id, "chat", 0, end, parent, attributes=attributes)

    tied = [call("a" * 16, "first", 20), call("a" * 16, "second", 20)]
    nested = [call("a" * 16, "outer", 30), call("b" * 16, "inner", 20, "a" * 16)]
    for spans, carrier in ((tied, None), (nested, "b" * 16)):
        expected = read_request(spans, carrier, GENAI.first_token)
        assert fast.read(spans, carrier) == expected
    assert expected.attributes["gen_ai.request.model"] == "outer"
    assert read_request(tied, None).attributes["gen_ai.request.model"] == "first"
