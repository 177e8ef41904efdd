"""Property: over any span tree, stage times plus `unattributed` add up to TTFT exactly."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanbudget.collector.budget import Budget
from spanbudget.collector.budget_file import load_budget
from spanbudget.collector.evaluate import Evaluator
from spanbudget.collector.spans import Span, SpanKind

REPO = Path(__file__).resolve().parents[2]
BUDGET: Budget = load_budget(REPO / "budget.yaml").budget
NOW = datetime(2026, 12, 2, tzinfo=UTC)
MS = 1_000_000

# Shapes that claim each stage, and some that claim none.
SHAPES = [
    ("chat m", SpanKind.CLIENT, "spanbudget-loadtest", {"gen_ai.operation.name": "chat"}),
    ("POST /v1/chat/completions", SpanKind.SERVER, "rag-gateway", {}),
    ("auth.verify", SpanKind.INTERNAL, "rag-gateway", {}),
    ("retrieval docs", SpanKind.INTERNAL, "rag-gateway", {"gen_ai.operation.name": "retrieval"}),
    ("query docs", SpanKind.INTERNAL, "rag-gateway", {"db.system.name": "qdrant"}),
    ("prompt.render", SpanKind.INTERNAL, "rag-gateway", {}),
    ("chat m", SpanKind.CLIENT, "rag-gateway", {"gen_ai.operation.name": "chat"}),
    ("POST", SpanKind.CLIENT, "rag-gateway", {}),
    ("llm_request", SpanKind.SERVER, "vllm", {}),
    ("cache.get", SpanKind.INTERNAL, "redis", {}),
    ("GET /healthz", SpanKind.SERVER, "other", {}),
]


@st.composite
def span_trees(draw: st.DrawFn) -> list[Span]:
    count = draw(st.integers(min_value=1, max_value=14))
    spans: list[Span] = []
    for index in range(count):
        name, kind, service, attrs = draw(st.sampled_from(SHAPES))
        attributes: dict[str, str | float | int] = dict(attrs)
        start = draw(st.integers(min_value=0, max_value=300)) * MS // 4
        duration = draw(st.integers(min_value=0, max_value=400)) * MS // 4
        if index and draw(st.booleans()):
            # skewed remote child, possibly outliving its parent by far
            start += draw(st.integers(min_value=-60, max_value=60)) * MS
        choice = draw(st.integers(min_value=0, max_value=9)) if index else 0
        if choice == 0:
            parent = None
        elif choice == 1:
            parent = "00000000deadbeef"  # an orphan: parent not in the trace
        else:
            parent = spans[draw(st.integers(min_value=0, max_value=index - 1))].span_id
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            attributes["gen_ai.response.time_to_first_chunk"] = draw(
                st.floats(min_value=0, max_value=0.5, allow_nan=False)
            )
        if name == "llm_request":
            for key in (
                "gen_ai.latency.time_to_first_token",
                "gen_ai.latency.time_in_queue",
                "gen_ai.latency.time_in_model_prefill",
            ):
                attributes[key] = draw(st.floats(min_value=0, max_value=0.3, allow_nan=False))
        spans.append(
            Span(
                trace_id="0" * 31 + "1",
                span_id=f"{index + 1:016x}",
                name=name,
                start_ns=1_000_000 * MS + start,
                end_ns=1_000_000 * MS + start + duration,
                parent_span_id=parent,
                kind=kind,
                service=service,
                attributes=attributes,
                error=draw(st.integers(min_value=0, max_value=20)) == 0,
            )
        )
    if draw(st.booleans()):  # duplicates count once
        spans.append(spans[draw(st.integers(min_value=0, max_value=len(spans) - 1))])
    return draw(st.permutations(spans))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_trees())
def test_stage_times_add_up_to_the_window(spans: list[Span]) -> None:
    verdict = Evaluator(BUDGET).evaluate(spans, evaluated_at=NOW)
    if verdict is None:
        return
    parts = [s.ms for s in verdict.stages if s.ms is not None]
    assert all(ms >= 0 for ms in parts)
    assert verdict.unattributed_ms >= 0
    for stage in verdict.stages:
        assert all(v >= 0 for v in stage.breakdown.values())
    total = sum(parts) + verdict.unattributed_ms
    if verdict.ttft_ms is not None:
        assert abs(total - verdict.ttft_ms) <= 0.01 + 1e-9
        assert verdict.ttft_ms >= 0
    else:  # incomplete: the window is the root span
        root = min(
            (
                s
                for s in spans
                if s.parent_span_id is None or s.parent_span_id == "00000000deadbeef"
            ),
            key=lambda s: (s.start_ns, -s.end_ns, s.span_id),
            default=None,
        )
        if root is not None:
            assert abs(total - round(root.duration_ns / MS, 2)) <= 0.01 + 1e-9


@settings(max_examples=200, deadline=None)
@given(span_trees())
def test_evaluation_ignores_span_order(spans: list[Span]) -> None:
    forward = Evaluator(BUDGET).evaluate(spans, evaluated_at=NOW)
    backward = Evaluator(BUDGET).evaluate(list(reversed(spans)), evaluated_at=NOW)
    if forward is None or backward is None:
        assert forward is backward
        return
    # Duplicates keep their first copy, so only compare when there are none.
    if len({s.span_id for s in spans}) == len(spans):
        assert forward.to_dict() == backward.to_dict()
