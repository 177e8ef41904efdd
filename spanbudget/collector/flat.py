"""The evaluator's fast path: one trace assembled into parallel arrays and attributed there.

The same rules as `attribution.assemble` and `attribution.attribute_window` (DESIGN §5),
without a `Node` per span: node `i` is `spans[i]` (None for a vLLM phase), its times are
`start[i]`/`end[i]`, its children `kids[i]`; nodes are in the same depth-first order as
`Tree.nodes`, parents first. `flatten` returns None for a trace whose spans sit in a parent
cycle; the evaluator judges those (rare, broken) traces on the `Node` tree instead. Tests
hold the two paths to identical verdicts (tests/core/test_fast_path.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from spanbudget.collector.budget import Selector
from spanbudget.collector.semconv import (
    VLLM_LATENCY_PREFILL,
    VLLM_LATENCY_QUEUE,
    VLLM_LATENCY_TTFT,
    VLLM_REQUEST_SPAN,
)
from spanbudget.collector.spans import Span, SpanKind, seconds_value
from spanbudget.collector.stage_table import PHASES, StageTable, Walk, resolve

__all__ = ["Flat", "attribute_flat", "first_token_flat", "flatten"]

_NS_PER_S = 1_000_000_000
_INTERNAL, _PRODUCER, _CONSUMER = SpanKind.INTERNAL, SpanKind.PRODUCER, SpanKind.CONSUMER
_LEAF: list[int] = []  # shared, never changed


class Flat:
    """One assembled trace as arrays (see the module's docstring)."""

    __slots__ = (
        "depth",
        "end",
        "ids",
        "kids",
        "matched",
        "on_path",
        "phases",
        "self_ns",
        "skew_ns",
        "spans",
        "stage",
        "start",
    )

    def __init__(self) -> None:
        self.spans: list[Span | None] = []
        self.ids: list[str] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.depth: list[int] = []
        self.kids: list[list[int]] = []
        self.stage: list[str | None] = []
        self.phases: dict[int, str] = {}  # vLLM phase nodes: index -> phase name
        self.matched: set[str] = set()
        self.skew_ns = 0
        self.self_ns: list[int] = []
        self.on_path: list[bool] = []

    def name(self, i: int) -> str:
        span = self.spans[i]
        return self.phases[i] if span is None else span.name


def flatten(spans: Sequence[Span], table: StageTable) -> Flat | None:
    """Assemble one trace as `attribution.assemble` does, classifying each node with
    `table`; None when it has no spans or some sit in a parent cycle (use the tree)."""
    shape = _shape(spans)
    if shape is None:
        walk = _walk(spans, table)[0]
    else:
        walk = table.walk(shape, lambda: _walk(spans, table))
    return None if walk is None else _run(spans, walk, table)


def _shape(spans: Sequence[Span]) -> Hashable | None:
    """What the walk over `spans` depends on when one span is the root: each span's name,
    kind, service and its parent's position (-1 for none). None when ids repeat."""
    positions = {span.span_id: i for i, span in enumerate(spans)}
    if len(positions) != len(spans):
        return None
    get = positions.get
    return tuple([(s.name, s.kind, s.service, get(s.parent_span_id, -1)) for s in spans])  # type: ignore[arg-type]


def _walk(spans: Sequence[Span], table: StageTable) -> tuple[Walk | None, bool]:
    """The depth-first walk from the root, with whether it follows from the trace's shape
    alone (one parentless span); None for no spans or spans in a parent cycle.

    A repeated span id counts once, its first copy; a span whose parent is absent or
    itself is parentless; with several parentless spans the earliest (longest, then
    lowest id) is the root and adopts the others after its own children.
    """
    first: dict[str, int] = {}
    for i, span in enumerate(spans):
        first.setdefault(span.span_id, i)
    children: dict[int, list[int]] = {}
    parentless: list[int] = []
    for i in first.values():
        parent_id = spans[i].parent_span_id
        parent = None if parent_id is None else first.get(parent_id)
        if parent is None or parent == i:
            parentless.append(i)
        else:
            children.setdefault(parent, []).append(i)
    if not parentless:
        return None, True
    if len(parentless) == 1:
        root = parentless[0]
        top = children.get(root, [])
    else:
        root = min(
            parentless, key=lambda i: (spans[i].start_ns, -spans[i].end_ns, spans[i].span_id)
        )
        top = children.get(root, []) + [i for i in parentless if i != root]
    span = spans[root]
    positions, parents = [root], [-1]
    decisions = [table.decision(span.name, span.kind, span.service, True)]
    stack = [(root, kid) for kid in reversed(top)]
    while stack:
        parent, i = stack.pop()
        span = spans[i]
        positions.append(i)
        parents.append(parent)
        decisions.append(table.decision(span.name, span.kind, span.service, False))
        below = children.get(i)
        if below is not None:
            stack.extend([(i, kid) for kid in reversed(below)])
    if len(positions) != len(first):
        return None, True  # spans caught in a parent cycle: the tree adopts them
    return Walk(positions, parents, decisions), len(parentless) == 1


def _run(spans: Sequence[Span], walk: Walk, table: StageTable) -> Flat:
    """Fill the arrays along `walk`: shift spans of another service that stick out of
    their parent back inside it (clock skew; their descendants move with them), classify
    each node (a node with no stage of its own takes its parent's) and add vLLM's phases."""
    flat = Flat()
    nodes, ids, starts, ends = flat.spans, flat.ids, flat.start, flat.end
    depths, kids, stages, matched = flat.depth, flat.kids, flat.stage, flat.matched
    positions, parents, decisions = walk.positions, walk.parents, walk.decisions
    node_of = [0] * len(spans)  # by position: the node index, and the shift it carries
    offset_of = [0] * len(spans)

    root_span = spans[positions[0]]
    decision = decisions[0]
    own = decision if decision.__class__ is str else resolve(decision, root_span.attributes)  # type: ignore[arg-type]
    if own:
        matched.add(own)
    nodes.append(root_span)
    ids.append(root_span.span_id)
    starts.append(root_span.start_ns)
    ends.append(root_span.end_ns)
    depths.append(0)
    kids.append([])
    stages.append(own or None)
    if root_span.name == VLLM_REQUEST_SPAN:
        _add_phases(flat, 0, table)
    skew = 0
    add_node, add_id, add_start, add_end = nodes.append, ids.append, starts.append, ends.append
    add_depth, add_kids, add_stage = depths.append, kids.append, stages.append
    for n in range(1, len(positions)):
        position, span = positions[n], spans[positions[n]]
        parent_position = parents[n]
        parent = node_of[parent_position]
        offset = offset_of[parent_position]
        start = span.start_ns + offset
        end = span.end_ns + offset
        parent_start, parent_end = starts[parent], ends[parent]
        if (start < parent_start or end > parent_end) and span.service != nodes[parent].service:  # type: ignore[union-attr]
            duration = end - start
            parent_duration = parent_end - parent_start
            if duration >= parent_duration:
                shift = parent_start - start
            else:
                shift = parent_start + (parent_duration - duration) // 2 - start
            start += shift
            end += shift
            offset += shift
            skew += abs(shift)
        decision = decisions[n]
        own = decision if decision.__class__ is str else resolve(decision, span.attributes)  # type: ignore[arg-type]
        if own:
            matched.add(own)
        index = len(ids)
        node_of[position] = index
        offset_of[position] = offset
        add_node(span)
        add_id(span.span_id)
        add_start(start)
        add_end(end)
        add_depth(depths[parent] + 1)
        add_kids([])
        add_stage(own or stages[parent])
        kids[parent].append(index)
        if span.name == VLLM_REQUEST_SPAN:
            _add_phases(flat, index, table)
    flat.skew_ns = skew
    return flat


def _add_phases(flat: Flat, index: int, table: StageTable) -> None:
    """`attribution._expand_vllm`: vLLM's phases as children of node `index`."""
    span = flat.spans[index]
    assert span is not None
    attributes = span.attributes
    ttft = seconds_value(attributes.get(VLLM_LATENCY_TTFT))
    if ttft is None:
        return
    queue = seconds_value(attributes.get(VLLM_LATENCY_QUEUE)) or 0.0
    prefill = seconds_value(attributes.get(VLLM_LATENCY_PREFILL))
    if prefill is None:
        prefill = max(0.0, ttft - queue)
    start, end = flat.start[index], flat.end[index]
    first_token = min(end, start + round(ttft * _NS_PER_S))
    prefill_start = max(start, first_token - round(prefill * _NS_PER_S))
    queue_start = max(start, prefill_start - round(queue * _NS_PER_S))
    bounds = (start, queue_start, prefill_start, first_token, end)
    service, span_id = span.service, span.span_id
    parent_stage = flat.stage[index]
    depth = flat.depth[index] + 1
    phases, matched, own_kids = flat.phases, flat.matched, flat.kids[index]
    ids, starts, ends = flat.ids, flat.start, flat.end
    for n, stage in enumerate(table.phases(service)):
        phase_start, phase_end = bounds[n], bounds[n + 1]
        if phase_end > phase_start:
            if stage:
                matched.add(stage)
            child = len(ids)
            name = PHASES[n]
            phases[child] = name
            flat.spans.append(None)
            ids.append(f"{span_id}:{name}")
            starts.append(phase_start)
            ends.append(phase_end)
            flat.depth.append(depth)
            flat.kids.append(_LEAF)
            flat.stage.append(stage or parent_stage)
            own_kids.append(child)


# A mark as the evaluator tries it: (attribute or None, event names, anchor, match).
_Mark = tuple[str | None, frozenset[str], Selector | None, tuple[Selector, ...]]


def first_token_flat(flat: Flat, marks: tuple[_Mark, ...]) -> int | None:
    """`evaluate._first_token` over the arrays: the outermost marked span's instant."""
    best: tuple[int, int, int] | None = None
    starts, depths = flat.start, flat.depth
    for i, span in enumerate(flat.spans):
        if span is None:
            continue
        attributes = span.attributes
        for key, names, anchor, match in marks:
            if key is not None:
                value = seconds_value(attributes.get(key))
                if value is None:
                    continue
                if match and not _carries(match, span, i == 0):
                    continue
                if anchor is None:
                    base: int | None = starts[i]
                else:
                    base = _anchor_end(flat, i, anchor)
                if base is None:
                    continue
                instant = base + round(value * 1e9)
            else:
                at = next((t for name, t in span.events if name in names), None)
                if at is None or (match and not _carries(match, span, i == 0)):
                    continue
                instant = at + (starts[i] - span.start_ns)  # shifted with the span
            candidate = (depths[i], starts[i], instant)
            if best is None or candidate < best:
                best = candidate
            break
    if best is None:
        return None
    return max(best[2], starts[0])


def _carries(match: tuple[Selector, ...], span: Span, is_root: bool) -> bool:
    return any(
        sel.matches_shape(span.name, span.kind, span.service, is_root)
        and sel.matches_attributes(span.attributes)
        for sel in match
    )


def _anchor_end(flat: Flat, index: int, anchor: Selector) -> int | None:
    found: tuple[int, int] | None = None
    for child in flat.kids[index]:
        span = flat.spans[child]
        if span is None:
            continue
        here = (flat.start[child], flat.end[child])
        if (
            anchor.matches_shape(span.name, span.kind, span.service, False)
            and anchor.matches_attributes(span.attributes)
            and (found is None or here > found)
        ):
            found = here
    return None if found is None else found[1]


def attribute_flat(flat: Flat, window_start: int, window_end: int) -> int:
    """`attribution.attribute_window` over the arrays: clip, rank, walk; sets `self_ns`
    and `on_path`; returns the window time no node covers."""
    starts, ends, kids, ids, nodes = flat.start, flat.end, flat.kids, flat.ids, flat.spans
    count = len(ids)
    starts[0] = low = min(max(starts[0], window_start), window_end)
    ends[0] = min(max(ends[0], low), window_end)
    walk: list[list[int]] = [_LEAF] * count  # replaced below wherever a node has children
    for i in range(count):  # parents come before their children
        below = kids[i]
        if not below:
            continue
        low, high = starts[i], ends[i]
        node = nodes[i]
        producer = node is not None and node.kind is _PRODUCER
        ranked: list[tuple[int, int, str, int]] = []
        for k in below:
            start, end = starts[k], ends[k]
            starts[k] = clipped = low if start < low else high if start > high else start
            ends[k] = clipped if end < clipped else high if end > high else end
            if (start >= high if start >= low else end <= low) or (
                producer and (kid := nodes[k]) is not None and kid.kind is _CONSUMER
            ):
                continue
            ranked.append((-ends[k], start, ids[k], k))
        if len(ranked) > 1:
            ranked.sort()
        walk[i] = [entry[3] for entry in ranked]
    self_ns = [0] * count
    on_path = [False] * count
    stack = [(0, ends[0], 0)]
    pop, push = stack.pop, stack.append
    while stack:
        current, cursor, index = pop()
        on_path[current] = True
        order = walk[current]
        n = len(order)
        while index < n and ends[order[index]] > cursor:
            index += 1
        if index < n:
            child = order[index]
            self_ns[current] += cursor - ends[child]
            push((current, starts[child], index + 1))
            push((child, ends[child], 0))
        else:
            self_ns[current] += cursor - starts[current]
    flat.self_ns = self_ns
    flat.on_path = on_path
    return max(0, (starts[0] - window_start) + (window_end - ends[0]))
