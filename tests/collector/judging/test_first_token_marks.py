"""First-token marks declared in the budget (DESIGN §5 rule 2, project notes): attributes
after the span start or after a child's end, events, `match`, and their order."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import load_budget, parse_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import COMPILED, Evaluator
from spanbudget.collector.judging.verdict import Status, Verdict
from spanbudget.collector.spans import AttrValue, Span, SpanEvent, SpanKind

from tests.support.traces import T0_NS, TraceBuilder, rag_trace

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
MS = 1_000_000
REFERENCE = load_budget(Path(__file__).resolve().parents[3] / "budget.yaml").budget

BUDGET = """\
version: 1
name: marks
total: {target_ms: 100, limit_ms: 200}
%s
stages:
  - {name: llm, target_ms: 50, limit_ms: 100, match: [{attributes: {op: chat}}]}
  - {name: app, target_ms: 50, limit_ms: 100, match: [{root: true}]}
"""
OPENLIT_LIKE = """\
first_token:
  - attribute: lit.ttft
    anchor: {child_end: {name: POST, kind: client}}
    match: [{attributes: {stream: true}}]
  - attribute: gen_ai.latency.time_to_first_token
"""
EVENTS = """\
first_token:
  - event: [chunk.new, chunk.old]
  - attribute: gen_ai.response.time_to_first_chunk
"""


def budget(first_token: str) -> Budget:
    return parse_budget(BUDGET % first_token).budget


def with_events(builder: TraceBuilder, span_id: str, *events: tuple[str, float]) -> None:
    """Give one span of the builder events at milliseconds from T0."""
    for i, span in enumerate(builder.spans):
        if span.span_id == span_id:
            builder.spans[i] = replace(
                span, events=tuple(SpanEvent(n, T0_NS + round(ms * MS)) for n, ms in events)
            )


def judge(b: Budget, spans: list[Span]) -> Verdict:
    verdict = Evaluator(b).evaluate(spans, evaluated_at=NOW)
    assert verdict is not None
    return verdict


def app_with_chat(*, stream: bool = True, post: bool = True, engine: bool = True) -> TraceBuilder:
    """app 0..100 → chat 10..100 (lit.ttft 0.030) → POST 12..20 → llm_request 14..98."""
    b = TraceBuilder()
    root = b.add("handle", 0, 100)
    chat = b.add(
        "chat m",
        10,
        100,
        parent=root,
        kind=SpanKind.CLIENT,
        attributes={"op": "chat", "stream": stream, "lit.ttft": 0.030},
    )
    parent = chat
    if post:
        parent = b.add("POST", 12, 20, parent=chat, kind=SpanKind.CLIENT)
    if engine:
        b.add(
            "llm_request",
            14,
            98,
            parent=parent,
            kind=SpanKind.SERVER,  # one service: no skew adjustment in these traces
            attributes={"gen_ai.latency.time_to_first_token": 0.025},
        )
    return b


def test_an_attribute_counts_from_the_end_of_the_anchor_child() -> None:
    verdict = judge(budget(OPENLIT_LIKE), app_with_chat().spans)
    assert verdict.ttft_ms == 50.0  # POST ends at 20, + 30 ms; not the chat's 10 + 30
    assert verdict.stage("llm").ms == 40.0
    assert verdict.stage("app").ms == 10.0


def test_without_the_anchor_child_the_next_mark_counts() -> None:
    verdict = judge(budget(OPENLIT_LIKE), app_with_chat(post=False).spans)
    assert verdict.ttft_ms == 39.0  # llm_request 14 + 25 ms
    verdict = judge(budget(OPENLIT_LIKE), app_with_chat(post=False, engine=False).spans)
    assert verdict.status is Status.INCOMPLETE


def test_match_limits_the_spans_that_carry_a_mark() -> None:
    verdict = judge(budget(OPENLIT_LIKE), app_with_chat(stream=False).spans)
    assert verdict.ttft_ms == 39.0  # not streamed: lit.ttft is the whole call, vLLM counts


def test_the_last_of_several_anchor_children_counts() -> None:
    b = app_with_chat(engine=False)
    chat = b.spans[1].span_id
    b.add("POST", 21, 25, parent=chat, kind=SpanKind.CLIENT)  # a retry, answered at 25
    assert judge(budget(OPENLIT_LIKE), b.spans).ttft_ms == 55.0


def test_the_first_event_of_the_names_is_the_first_token() -> None:
    b = app_with_chat(post=False, engine=False)
    chat = b.spans[1].span_id
    with_events(b, chat, ("other", 12.0), ("chunk.old", 47.5), ("chunk.new", 61.0))
    verdict = judge(budget(EVENTS), b.spans)
    assert verdict.ttft_ms == 47.5
    assert verdict.stage("llm").ms == 37.5


def test_an_event_mark_on_a_shifted_remote_span_moves_with_it() -> None:
    b = TraceBuilder()
    root = b.add("handle", 0, 100, service="app")
    # A remote child 50 ms ahead of its parent's clock (0..100): centred back at 10..90.
    chat = b.add(
        "chat m", 40, 120, parent=root, kind=SpanKind.CLIENT, service="llm-proxy",
        attributes={"op": "chat"},
    )  # fmt: skip
    with_events(b, chat, ("chunk.new", 70.0))
    verdict = judge(budget(EVENTS), b.spans)
    assert verdict.skew_adjusted_ms == 30.0
    assert verdict.ttft_ms == 40.0  # 70 shifted back by 30


def test_the_outermost_span_with_a_mark_wins_and_marks_go_in_order_on_a_span() -> None:
    b = app_with_chat(post=False)
    chat = b.spans[1].span_id
    root = b.spans[0].span_id
    with_events(b, chat, ("chunk.new", 33.0))
    b.spans[0] = replace(b.spans[0], attributes={"gen_ai.response.time_to_first_chunk": 0.040})
    assert judge(budget(EVENTS), b.spans).ttft_ms == 40.0  # the root's own mark
    b.spans[0] = replace(b.spans[0], attributes={})
    assert judge(budget(EVENTS), b.spans).ttft_ms == 33.0  # then the chat span's event
    # Both marks on one span: the first one listed counts.
    b.spans[1] = replace(
        b.spans[1],
        attributes={**b.spans[1].attributes, "gen_ai.response.time_to_first_chunk": 0.02},
    )
    assert judge(budget(EVENTS), b.spans).ttft_ms == 33.0
    assert root != chat


def test_without_first_token_the_default_marks_ignore_events() -> None:
    b = app_with_chat(post=False, engine=False)
    with_events(b, b.spans[1].span_id, ("chunk.new", 33.0))
    default = parse_budget((BUDGET % "").replace("\n\n", "\n")).budget
    verdict = judge(default, b.spans)
    assert verdict.ttft_ms is None
    # Nothing in it is an LLM call by the conventions' names or by a mark the budget
    # reads: not a request to judge on time to first token.
    assert verdict.status is Status.NOT_APPLICABLE


@pytest.mark.parametrize("compiled", [True, False] if COMPILED else [False])
@pytest.mark.parametrize("value", [math.nan, math.inf, 1e300, 10**400, -0.01, True, "0.04"])
def test_a_mark_that_is_no_finite_number_of_seconds_says_nothing(
    value: AttrValue, compiled: bool
) -> None:
    """NaN, an infinity, seconds whose nanoseconds overflow a float, a negative value, a
    bool or text: the mark is ignored, as if absent, and the next one counts (these used
    to stop the evaluator with ValueError or OverflowError)."""
    b = rag_trace()
    b.spans[0] = replace(
        b.spans[0],
        attributes={**b.spans[0].attributes, "gen_ai.response.time_to_first_chunk": value},
    )
    b.spans[-1] = replace(
        b.spans[-1],
        attributes={**b.spans[-1].attributes, "gen_ai.latency.time_in_queue": value},
    )
    verdict = Evaluator(REFERENCE, compiled=compiled).evaluate(b.spans, evaluated_at=NOW)
    assert verdict is not None
    # The gateway's own mark gives the first token instead: 134 ms after its start at 5.
    assert verdict.ttft_ms == 139.0
    assert "vllm.queue" not in verdict.stage("prefill").breakdown
