"""Properties over random span trees (tests/support/judging.py: ties, producers and
consumers, nested first-token marks, streamed responses, one host or several): stage
times plus `unattributed` add up to TTFT exactly on every path, span order does not
matter, and the critical-path walk gives every span the time that DESIGN §5 rules 2, 3b
and 5, read directly, give it."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spanbudget.collector.judging.attribution import Node, Tree, assemble, attribute_window
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.spans import Span, SpanKind

from tests.support.judging import BUDGET, MS, NOW, ORPHAN_PARENT, paths, span_trees


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_trees())
def test_stage_times_add_up_to_the_window(spans: list[Span]) -> None:
    for evaluator in paths(BUDGET):
        check_sum(evaluator, spans)


def check_sum(evaluator: Evaluator, spans: list[Span]) -> None:
    verdict = evaluator.evaluate(spans, evaluated_at=NOW)
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
            (s for s in spans if s.parent_span_id is None or s.parent_span_id == ORPHAN_PARENT),
            key=lambda s: (s.start_ns, -s.end_ns, s.span_id),
            default=None,
        )
        if root is not None:
            assert abs(total - round((root.end_ns - root.start_ns) / MS, 2)) <= 0.01 + 1e-9


@settings(max_examples=200, deadline=None)
@given(span_trees(), st.randoms(use_true_random=False))
def test_evaluation_ignores_span_order(spans: list[Span], shuffle: random.Random) -> None:
    # A duplicate is the same span again, so whichever copy comes first, it counts once.
    shuffled = list(spans)
    shuffle.shuffle(shuffled)
    for evaluator in paths(BUDGET):
        forward = evaluator.evaluate(spans, evaluated_at=NOW)
        other = evaluator.evaluate(shuffled, evaluated_at=NOW)
        if forward is None or other is None:
            assert forward is other
        else:
            assert forward.to_dict() == other.to_dict()


def walk_by_the_rule(
    tree: Tree, window_start: int, window_end: int, marks: dict[str, int]
) -> dict[str, int]:
    """DESIGN §5 rules 2, 3b and 5 read directly, slowly: each node's own time on the
    critical path, with `marks` each marked node's first-token instant.

    Unlike `attribute_window` it sorts nothing, keeps no pointer and reads no `reach`:
    it finds each client's streamed responses among its children, and at every step of
    the walk looks at all the children not yet taken.
    """
    clipped: dict[str, tuple[int, int]] = {}

    def own_end(node: Node) -> int:
        end = node.end
        if node.kind is SpanKind.CLIENT:
            for kid in node.children:  # rule 3b: a streamed response outlives its client
                if kid.kind is SpanKind.SERVER and node.start <= kid.start < node.end < kid.end:
                    end = max(end, kid.end)
        mark = marks.get(node.span_id)
        return end if mark is None else max(node.start, min(end, mark))  # rule 2

    def clip(node: Node, low: int, high: int) -> None:
        start = min(max(node.start, low), high)
        clipped[node.span_id] = (start, min(max(own_end(node), start), high))
        for kid in node.children:
            clip(kid, *clipped[node.span_id])

    def on_the_walk(node: Node, kid: Node) -> bool:
        low, high = clipped[node.span_id]
        if node.kind is SpanKind.PRODUCER and kid.kind is SpanKind.CONSUMER:
            return False
        return kid.start < high if kid.start >= low else own_end(kid) > low

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
@given(
    span_trees(),
    st.integers(min_value=0, max_value=120),
    st.lists(st.integers(min_value=-10, max_value=130), max_size=16),
)
def test_the_walk_follows_the_rule(
    spans: list[Span], window_percent: int, mark_percents: list[int]
) -> None:
    # Two trees from the same spans: attribute_window clips its tree in place.
    tree, reference = assemble(spans), assemble(spans)
    assert tree is not None
    assert reference is not None
    root = reference.root
    window_end = root.start + (root.end - root.start) * window_percent // 100
    # Marks at a share of each node's own span (past its end, or before its start, too).
    marks = {
        node.span_id: node.start + (node.end - node.start) * percent // 100
        for node, percent in zip(reference.nodes, mark_percents, strict=False)
        if not node.virtual
    }
    for node in tree.nodes:
        node.mark = marks.get(node.span_id)
    expected = walk_by_the_rule(reference, root.start, window_end, marks)
    uncovered = attribute_window(tree, root.start, window_end)
    got = {node.span_id: node.self_ns for node in tree.nodes if node.on_path}
    assert got == expected
    assert all(node.self_ns == 0 for node in tree.nodes if not node.on_path)
    assert sum(got.values()) + uncovered == window_end - root.start
