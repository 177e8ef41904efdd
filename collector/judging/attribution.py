"""Trace assembly and exclusive critical-path attribution (DESIGN §5, rules 1, 3 and 5).

`assemble` turns a flat list of spans into a tree: one root, orphans under it, duplicate
spans dropped, children on another host shifted into their parents (Jaeger's clock-skew
adjuster's rule), streamed responses noted on their client spans, and vLLM's
`llm_request` expanded into its phases. `attribute_window` then clips the tree to the
TTFT window and to each span's own first-token mark, and walks the critical path back
from the first token, giving every instant of the window to exactly one node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from spanbudget.common.semconv import (
    GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
    GEN_AI_LATENCY_TIME_IN_QUEUE,
    GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN,
    VLLM_PHASE_SPANS,
    VLLM_REQUEST_SPAN,
)

from ..spans import AttrValue, Span, SpanKind, same_host, seconds_value

__all__ = ["Classifier", "Node", "Tree", "assemble", "attribute_window"]

_NS_PER_S = 1_000_000_000
_PRODUCER, _CONSUMER = SpanKind.PRODUCER, SpanKind.CONSUMER
_CLIENT, _SERVER = SpanKind.CLIENT, SpanKind.SERVER


@dataclass(slots=True, eq=False)
class Node:
    """A span placed in the tree, with skew-adjusted (`start`, `end`) times in ns.

    Virtual nodes stand for the phases of a vLLM request; their `span_id` is the request
    span's id with the phase appended. `reach` is the latest end of a streamed SERVER
    child that outlives this CLIENT span (rule 3b; None: none) and `mark` the instant of its
    own first-token mark (rule 2; None: none): `attribute_window` ends the node at
    `min(max(end, reach), mark)`. It also reorders `children`: first the `walkable` ones
    in the order the walk tries them, then those off the critical path.
    """

    span_id: str
    name: str
    kind: SpanKind
    service: str
    attributes: Mapping[str, AttrValue]
    error: bool
    start: int
    end: int
    depth: int = 0
    children: list[Node] = field(default_factory=list)
    virtual: bool = False
    parent: Node | None = None
    stage: str | None = None
    self_ns: int = 0  # exclusive time on the critical path, set by attribute_window
    on_path: bool = False  # the critical path passes through it, set by attribute_window
    walkable: int = 0  # how many of `children` the walk may enter, set by attribute_window
    host: str | None = None
    reach: int | None = None
    mark: int | None = None


Classifier = Callable[["Node", bool], "str | None"]  # (node, is_root) -> its own stage


@dataclass(slots=True)
class Tree:
    root: Node
    nodes: list[Node]  # depth-first, parents before children
    skew_ns: int  # total absolute shift applied to children on other hosts

    def release(self) -> None:
        """Drop the parent links, the tree's only reference cycles.

        Without them a finished tree is freed at once by reference counting instead of
        waiting for the cycle collector, which matters at thousands of traces a second.
        """
        for node in self.nodes:
            node.parent = None


def _node(span: Span, offset: int, depth: int, parent: Node | None) -> Node:
    return Node(
        span.span_id,
        span.name,
        span.kind,
        span.service,
        span.attributes,
        span.error,
        span.start_ns + offset,
        span.end_ns + offset,
        depth,
        parent=parent,
        host=span.host,
    )


def _expand_vllm(node: Node) -> None:
    """Add vLLM's phases as virtual children: frontend, queue, prefill, decode.

    Values that do not fit inside the span are clamped to it: prefill first, then queue.
    vLLM before 0.10.2 (the V0 engine) reports no prefill time; its queue time runs from
    arrival, so the prefill is the rest of the time to the first token and no frontend.
    """
    ttft = seconds_value(node.attributes.get(GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN))
    if ttft is None:
        return
    queue = seconds_value(node.attributes.get(GEN_AI_LATENCY_TIME_IN_QUEUE)) or 0.0
    prefill = seconds_value(node.attributes.get(GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL))
    if prefill is None:
        prefill = max(0.0, ttft - queue)
    start, end = node.start, node.end
    first_token = min(end, start + round(ttft * _NS_PER_S))
    prefill_start = max(start, first_token - round(prefill * _NS_PER_S))
    queue_start = max(start, prefill_start - round(queue * _NS_PER_S))
    phases = (
        ("vllm.frontend", start, queue_start),
        ("vllm.queue", queue_start, prefill_start),
        ("vllm.prefill", prefill_start, first_token),
        ("vllm.decode", first_token, end),
    )
    for name, phase_start, phase_end in phases:
        if phase_end > phase_start:
            node.children.append(
                Node(
                    f"{node.span_id}:{name}",
                    name,
                    SpanKind.INTERNAL,
                    node.service,
                    {},
                    False,
                    phase_start,
                    phase_end,
                    node.depth + 1,
                    virtual=True,
                    parent=node,
                )
            )


def assemble(spans: Sequence[Span], classify: Classifier | None = None) -> Tree | None:
    """Build the tree of one trace; None for an empty list.

    With `classify`, every node also gets its stage on the way (DESIGN §5 rule 4): its own,
    `classify(node, is_root)`, or else its parent's.
    """
    by_id: dict[str, Span] = {}
    for span in spans:
        by_id.setdefault(span.span_id, span)  # duplicates count once
    if not by_id:
        return None
    children: dict[str, list[Span]] = {}
    parentless: list[Span] = []
    for span in by_id.values():
        parent_id = span.parent_span_id
        if parent_id is None or parent_id not in by_id or parent_id == span.span_id:
            parentless.append(span)
        else:
            children.setdefault(parent_id, []).append(span)
    if parentless:
        root_span = min(parentless, key=lambda s: (s.start_ns, -s.end_ns, s.span_id))
    else:  # every span sits in a parent cycle: take the earliest as root
        root_span = min(by_id.values(), key=lambda s: (s.start_ns, -s.end_ns, s.span_id))
    adopted = [s for s in parentless if s is not root_span]
    root = _node(root_span, 0, 0, None)
    if classify is not None:
        root.stage = classify(root, True)
    nodes = [root]
    if _reads_phases(root, children.get(root_span.span_id, ())):  # vLLM traced alone
        _add_vllm_phases(root, nodes, classify)
    skew = 0
    visited = {root_span.span_id}
    # (parent node, child span, offset inherited from the parent's own shift)
    stack: list[tuple[Node, Span, int]] = []

    def push_children(parent: Node, kids: list[Span], offset: int) -> None:
        for kid in reversed(kids):
            if kid.span_id not in visited:
                visited.add(kid.span_id)
                stack.append((parent, kid, offset))

    push_children(root, children.get(root_span.span_id, []) + adopted, 0)
    while True:
        while stack:
            parent, span, offset = stack.pop()
            node = _node(span, offset, parent.depth + 1, parent)
            if not same_host(node.host, node.service, parent.host, parent.service):
                shift = _skew_shift(parent, node)
                node.start += shift
                node.end += shift
                offset += shift
                skew += abs(shift)
            if (
                node.kind is _SERVER
                and parent.kind is _CLIENT
                and parent.start <= node.start < parent.end < node.end
                and (parent.reach is None or node.end > parent.reach)
            ):
                parent.reach = node.end  # a streamed response outlives its client span
            if classify is not None:
                node.stage = classify(node, False) or parent.stage
            parent.children.append(node)
            nodes.append(node)
            if _reads_phases(node, children.get(span.span_id, ())):
                _add_vllm_phases(node, nodes, classify)
            push_children(node, children.get(span.span_id, []), offset)
        if len(visited) == len(by_id):
            break
        # Spans caught in a parent cycle are unreachable from the root: adopt them too.
        stray = [s for s in by_id.values() if s.span_id not in visited]
        if not stray:
            break
        push_children(root, [min(stray, key=lambda s: (s.start_ns, s.span_id))], 0)
    return Tree(root, nodes, skew)


def _reads_phases(node: Node, kids: Sequence[Span]) -> bool:
    """Whether vLLM's phases come from this node's latency attributes: a `llm_request`
    without vLLM's per-phase spans under it (those, where present, are its phases)."""
    return node.name == VLLM_REQUEST_SPAN and not any(kid.name in VLLM_PHASE_SPANS for kid in kids)


def _add_vllm_phases(node: Node, nodes: list[Node], classify: Classifier | None) -> None:
    _expand_vllm(node)
    for phase in node.children:
        if classify is not None:
            phase.stage = classify(phase, False) or node.stage
        nodes.append(phase)


def _skew_shift(parent: Node, child: Node) -> int:
    """How far to move a child on another host than its parent (rule 3a, the rule of
    Jaeger's clock-skew adjuster): a child longer than its parent that starts before it
    starts with it, one that starts inside it stays (an async call, or a streamed
    response); any other child that sticks out is centred in the parent."""
    child_duration = child.end - child.start
    parent_duration = parent.end - parent.start
    if child_duration > parent_duration:
        return parent.start - child.start if child.start < parent.start else 0
    if child.start >= parent.start and child.end <= parent.end:
        return 0
    return parent.start + (parent_duration - child_duration) // 2 - child.start


def attribute_window(tree: Tree, window_start: int, window_end: int) -> int:
    """Clip the tree to `[window_start, window_end]` and set every node's `self_ns`.

    Every node first ends at `min(max(end, reach), mark)`: a client span lasts as long as
    the streamed response it waits on (rule 3b), and a span that carries a first-token
    mark is done at it (rule 2). Then it is clipped to its (already clipped) parent, the
    root to the window. A child left with no time inside its parent (it starts at or after
    the parent's end, or ends at or before the parent's start) is off the walk, with its
    subtree; so is a CONSUMER child of a PRODUCER, which does not block it (Jaeger's
    rules). Then walk back from the window's end as Jaeger's critical path does: at each
    node, descend into the child with the latest clipped end at or before the cursor;
    among equal ends, the earliest start before clipping wins, then the lowest span id.
    Time not covered that way is the node's own. Returns the window time that no node
    covers (before the root started or after it ended), so that the nodes' `self_ns` plus
    the return value always equal the window. It works in place, once per tree.
    """
    root = tree.root
    root.start = start = min(max(root.start, window_start), window_end)
    root.end = min(max(_own_end(root), start), window_end)
    for node in tree.nodes:  # parents come before their children
        node.self_ns = 0
        node.on_path = False
        kids = node.children
        if not kids:
            node.walkable = 0
            continue
        low, high = node.start, node.end
        producer = node.kind is _PRODUCER
        ranked: list[tuple[int, int, str, Node]] = []
        off: list[Node] = []
        for kid in kids:  # clip each child, keeping its start before clipping at hand
            start, end = kid.start, _own_end(kid)
            kid.start = clipped = low if start < low else high if start > high else start
            kid.end = clipped if end < clipped else high if end > high else end
            if (start >= high if start >= low else end <= low) or (
                producer and kid.kind is _CONSUMER
            ):
                off.append(kid)
            else:  # latest clipped end first; span ids are unique, nodes never compare
                ranked.append((-kid.end, start, kid.span_id, kid))
        node.walkable = len(ranked)
        if len(ranked) > 1:
            ranked.sort()
        if off or len(ranked) > 1:  # the walk's children in its order, then the rest
            node.children = [entry[3] for entry in ranked] + off
    _walk(root, root.end)
    uncovered = (root.start - window_start) + (window_end - root.end)
    return max(0, uncovered)


def _own_end(node: Node) -> int:
    """Where a node's time ends for attribution before its parent clips it: extended to
    the streamed response it waits on (rule 3b), cut at its own first-token mark (rule 2),
    never before its start."""
    end = node.end
    if node.reach is not None and node.reach > end:
        end = node.reach
    mark = node.mark
    if mark is not None and mark < end:
        end = mark if mark > node.start else node.start
    return end


def _walk(node: Node, cursor: int) -> None:
    # Explicit stack: deep traces must not hit Python's recursion limit.
    # Frame: (node, cursor, index of the next child to consider).
    stack: list[tuple[Node, int, int]] = [(node, cursor, 0)]
    while stack:
        current, cursor, index = stack.pop()
        current.on_path = True
        kids = current.children
        count = current.walkable
        while index < count and kids[index].end > cursor:
            index += 1  # overlaps the cursor or ends after it: not on the path
        if index < count:
            child = kids[index]
            current.self_ns += cursor - child.end
            stack.append((current, child.start, index + 1))
            stack.append((child, child.end, 0))
        else:
            current.self_ns += cursor - current.start
