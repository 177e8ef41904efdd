"""Properties over random span trees, ties and producer/consumer pairs included: stage
times plus `unattributed` add up to TTFT exactly, and the critical-path walk gives every
span the time that DESIGN §5.5, read directly, gives it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanbudget.collector.attribution import Node, Tree, assemble, attribute_window
from spanbudget.collector.budget import Budget
from spanbudget.collector.budget_file import load_budget
from spanbudget.collector.evaluate import Evaluator
from spanbudget.collector.spans import Span, SpanKind

REPO = Path(__file__).resolve().parents[2]
BUDGET: Budget = load_budget(REPO / "budget.yaml").budget
NOW = datetime(2026, 12, 2, tzinfo=UTC)
MS = 1_000_000
BASE_NS = 1_000_000 * MS

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
    # Producers and consumers: a consumer under a producer is off the critical path.
    ("prompt.enqueue", SpanKind.PRODUCER, "rag-gateway", {}),
    ("publish jobs", SpanKind.PRODUCER, "rag-gateway", {}),
    ("retrieval worker", SpanKind.CONSUMER, "rag-worker", {"gen_ai.operation.name": "retrieval"}),
    ("process jobs", SpanKind.CONSUMER, "rag-gateway", {}),
]


def seconds(most: float, *, coarse: bool) -> st.SearchStrategy[float]:
    """Durations in seconds; on the coarse grid, whole multiples of 10 ms."""
    if coarse:
        return st.integers(min_value=0, max_value=round(most * 100)).map(lambda n: n / 100)
    return st.floats(min_value=0, max_value=most, allow_nan=False)


@st.composite
def span_trees(draw: st.DrawFn) -> list[Span]:
    count = draw(st.integers(min_value=1, max_value=14))
    # A coarse grid makes ties common: children that end together, with their parent, or
    # with the first token, and children that overflow their parent or the mark together.
    step = draw(st.sampled_from([MS // 4, 10 * MS]))
    spans: list[Span] = []
    by_id: dict[str, Span] = {}
    for index in range(count):
        name, kind, service, attrs = draw(st.sampled_from(SHAPES))
        attributes: dict[str, str | float | int] = dict(attrs)
        start = draw(st.integers(min_value=0, max_value=75 * MS // step)) * step
        duration = draw(st.integers(min_value=0, max_value=100 * MS // step)) * step
        if index and draw(st.booleans()):
            # skewed remote child, possibly outliving its parent by far
            unit = max(step, MS)
            start += draw(st.integers(min_value=-60 * MS // unit, max_value=60 * MS // unit)) * unit
        choice = draw(st.integers(min_value=0, max_value=9)) if index else 0
        if choice == 0:
            parent = None
        elif choice == 1:
            parent = "00000000deadbeef"  # an orphan: parent not in the trace
        else:
            parent = spans[draw(st.integers(min_value=0, max_value=index - 1))].span_id
        end = start + duration
        if index and draw(st.integers(min_value=0, max_value=2)) == 0:
            # End with the parent or another earlier span (a sibling, say), or overflow it.
            other = by_id.get(parent or "") if draw(st.booleans()) else None
            if other is None:
                other = spans[draw(st.integers(min_value=0, max_value=index - 1))]
            end = max(start, other.end_ns - BASE_NS + draw(st.sampled_from([0, 0, step, 3 * step])))
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            attributes["gen_ai.response.time_to_first_chunk"] = draw(
                seconds(0.5, coarse=step >= MS)
            )
        if name == "llm_request":
            for key in (
                "gen_ai.latency.time_to_first_token",
                "gen_ai.latency.time_in_queue",
                "gen_ai.latency.time_in_model_prefill",
            ):
                attributes[key] = draw(seconds(0.3, coarse=step >= MS))
        span = Span(
            trace_id="0" * 31 + "1",
            span_id=f"{index + 1:016x}",
            name=name,
            start_ns=BASE_NS + start,
            end_ns=BASE_NS + end,
            parent_span_id=parent,
            kind=kind,
            service=service,
            attributes=attributes,
            error=draw(st.integers(min_value=0, max_value=20)) == 0,
        )
        spans.append(span)
        by_id[span.span_id] = span
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


def walk_by_the_rule(tree: Tree, window_start: int, window_end: int) -> dict[str, int]:
    """DESIGN §5.5 read directly, slowly: each node's own time on the critical path.

    Unlike `attribute_window` it sorts nothing and keeps no pointer: at every step it
    looks at all the children not yet taken.
    """
    clipped: dict[str, tuple[int, int]] = {}

    def clip(node: Node, low: int, high: int) -> None:
        start = min(max(node.start, low), high)
        clipped[node.span_id] = (start, min(max(node.end, start), high))
        for kid in node.children:
            clip(kid, *clipped[node.span_id])

    def on_the_walk(node: Node, kid: Node) -> bool:
        low, high = clipped[node.span_id]
        if node.kind is SpanKind.PRODUCER and kid.kind is SpanKind.CONSUMER:
            return False
        return kid.start < high if kid.start >= low else kid.end > low

    own: dict[str, int] = {}

    def visit(node: Node) -> None:
        start, cursor = clipped[node.span_id]
        own[node.span_id] = 0
        left = [kid for kid in node.children if on_the_walk(node, kid)]
        while True:
            ready = [kid for kid in left if clipped[kid.span_id][1] <= cursor]
            if not ready:
                break
            # latest clipped end; then earliest start before clipping; then lowest id
            best = min(ready, key=lambda k: (-clipped[k.span_id][1], k.start, k.span_id))
            left.remove(best)
            kid_start, kid_end = clipped[best.span_id]
            own[node.span_id] += cursor - kid_end
            visit(best)
            cursor = kid_start
        own[node.span_id] += cursor - start

    clip(tree.root, window_start, window_end)
    visit(tree.root)
    return own


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_trees(), st.integers(min_value=0, max_value=120))
def test_the_walk_follows_the_rule(spans: list[Span], window_percent: int) -> None:
    # Two trees from the same spans: attribute_window clips its tree in place.
    tree, reference = assemble(spans), assemble(spans)
    assert tree is not None
    assert reference is not None
    root = reference.root
    window_end = root.start + (root.end - root.start) * window_percent // 100
    expected = walk_by_the_rule(reference, root.start, window_end)
    uncovered = attribute_window(tree, root.start, window_end)
    got = {node.span_id: node.self_ns for node in tree.nodes if node.on_path}
    assert got == expected
    assert all(node.self_ns == 0 for node in tree.nodes if not node.on_path)
    assert sum(got.values()) + uncovered == window_end - root.start
