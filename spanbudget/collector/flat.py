"""The evaluator's fast path: one trace assembled into parallel arrays and attributed there.

The same rules as `attribution.assemble` and `attribution.attribute_window` (DESIGN §5),
without a `Node` per span: node `i` is `spans[i]` (None for a vLLM phase), its times are
`start[i]`/`end[i]`, its children `kids[i]`; nodes are in the same depth-first order as
`Tree.nodes`, parents first. `flatten` returns None for a trace whose spans sit in a parent
cycle; the evaluator judges those (rare, broken) traces on the `Node` tree instead. Tests
hold the two paths to identical verdicts (tests/core/test_fast_path.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spanbudget.collector.budget import Selector, attr_text
from spanbudget.collector.semconv import (
    VLLM_LATENCY_PREFILL,
    VLLM_LATENCY_QUEUE,
    VLLM_LATENCY_TTFT,
    VLLM_REQUEST_SPAN,
)
from spanbudget.collector.spans import AttrValue, Span, SpanKind

__all__ = ["Flat", "StageTable", "attribute_flat", "first_token_flat", "flatten"]

_NS_PER_S = 1_000_000_000
_INTERNAL, _PRODUCER, _CONSUMER = SpanKind.INTERNAL, SpanKind.PRODUCER, SpanKind.CONSUMER
_NO_ATTRIBUTES: Mapping[str, AttrValue] = {}
_MEMO_LIMIT = 4096
_LEAF: list[int] = []  # shared, never changed
_PHASES = ("vllm.frontend", "vllm.queue", "vllm.prefill", "vllm.decode")

# A shape's decision: a stage name ("" for none) when the shape alone decides it, else the
# selectors still in play, in file order: (stage, ((attribute, accepted texts), ...)).
_Checks = tuple[tuple[str, frozenset[str]], ...]
_Decision = str | tuple[tuple[str, _Checks], ...]


class StageTable:
    """A budget's stage selectors compiled once: each span shape (name, kind, service,
    root-ness) is resolved against the selectors once, and only the attributes its
    remaining selectors read are looked at per span after that."""

    __slots__ = ("_flat", "_phases", "memo")

    def __init__(self, flat: Sequence[tuple[str, Selector]]) -> None:
        self._flat = tuple(flat)
        self.memo: dict[tuple[str, SpanKind, str, bool], _Decision] = {}
        self._phases: dict[str, tuple[str, ...]] = {}

    def phases(self, service: str) -> tuple[str, ...]:
        """The stages ("" for none) of vLLM's phase nodes (internal, no attributes) of
        `service`, in `_PHASES` order."""
        stages = self._phases.get(service)
        if stages is None:
            if len(self._phases) >= _MEMO_LIMIT:
                self._phases.clear()
            stages = self._phases[service] = tuple(
                self.stage(name, _INTERNAL, service, _NO_ATTRIBUTES, False) for name in _PHASES
            )
        return stages

    def stage(
        self,
        name: str,
        kind: SpanKind,
        service: str,
        attributes: Mapping[str, AttrValue],
        is_root: bool,
    ) -> str:
        """The first stage (file order) with a matching selector, or ""."""
        key = (name, kind, service, is_root)
        decision = self.memo.get(key)
        if decision is None:
            decision = self._compile(key)
        if decision.__class__ is str:
            return decision
        return _resolve(decision, attributes)  # type: ignore[arg-type]

    def _compile(self, key: tuple[str, SpanKind, str, bool]) -> _Decision:
        name, kind, service, is_root = key
        left: list[tuple[str, _Checks]] = []
        for stage, sel in self._flat:
            if sel.matches_shape(name, kind, service, is_root):
                left.append((stage, tuple(sel.attributes.items())))
                if not sel.attributes:
                    break  # it always matches: no later selector is ever reached
        decision: _Decision
        if not left:
            decision = ""
        elif not left[0][1]:
            decision = left[0][0]
        else:
            decision = tuple(left)
        if len(self.memo) >= _MEMO_LIMIT:
            self.memo.clear()
        self.memo[key] = decision
        return decision


def _resolve(left: tuple[tuple[str, _Checks], ...], attributes: Mapping[str, AttrValue]) -> str:
    get = attributes.get
    for stage, checks in left:
        for key, accepted in checks:
            value = get(key)
            if value is None:
                break
            if value.__class__ is not str:
                value = attr_text(value)
            if value not in accepted:
                break
        else:
            return stage
    return ""


class Flat:
    """One assembled trace as arrays (see the module's docstring)."""

    __slots__ = (
        "by_id",
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

    def __init__(self, by_id: dict[str, Span]) -> None:
        self.by_id = by_id
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
    by_id = {span.span_id: span for span in spans}
    if len(by_id) != len(spans):  # duplicates count once, the first copy
        by_id = {}
        for span in spans:
            if span.span_id not in by_id:
                by_id[span.span_id] = span
    if not by_id:
        return None
    children: dict[str, list[Span]] = {}
    parentless: list[Span] = []
    for span in by_id.values():
        parent_id = span.parent_span_id
        if parent_id is None or parent_id not in by_id or parent_id == span.span_id:
            parentless.append(span)
        else:
            siblings = children.get(parent_id)
            if siblings is None:
                children[parent_id] = [span]
            else:
                siblings.append(span)
    if not parentless:
        return None
    if len(parentless) == 1:
        root_span = parentless[0]
        top = children.get(root_span.span_id, [])
    else:
        root_span = min(parentless, key=lambda s: (s.start_ns, -s.end_ns, s.span_id))
        top = children.get(root_span.span_id, []) + [s for s in parentless if s is not root_span]

    flat = Flat(by_id)
    nodes, ids, starts, ends = flat.spans, flat.ids, flat.start, flat.end
    depths, kids, stages, matched = flat.depth, flat.kids, flat.stage, flat.matched
    memo_get = table.memo.get
    classify = table.stage
    resolve = _resolve

    own = classify(root_span.name, root_span.kind, root_span.service, root_span.attributes, True)
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
    stack = [(0, kid, 0) for kid in reversed(top)]
    pop, push = stack.pop, stack.append
    while stack:
        parent, span, offset = pop()
        start = span.start_ns + offset
        end = span.end_ns + offset
        service = span.service
        parent_start, parent_end = starts[parent], ends[parent]
        if (start < parent_start or end > parent_end) and service != nodes[parent].service:  # type: ignore[union-attr]
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
        name, kind = span.name, span.kind
        decision = memo_get((name, kind, service, False))
        if decision.__class__ is str:
            own = decision
        elif decision is None:
            own = classify(name, kind, service, span.attributes, False)
        else:
            own = resolve(decision, span.attributes)  # type: ignore[arg-type]
        if own:
            matched.add(own)
        index = len(ids)
        add_node(span)
        add_id(span.span_id)
        add_start(start)
        add_end(end)
        add_depth(depths[parent] + 1)
        add_kids([])
        add_stage(own or stages[parent])
        kids[parent].append(index)
        if name == VLLM_REQUEST_SPAN:
            _add_phases(flat, index, table)
        below = children.get(span.span_id)
        if below is not None:
            for kid in reversed(below):
                push((index, kid, offset))
    if len(ids) - len(flat.phases) != len(by_id):
        return None  # spans caught in a parent cycle: the tree adopts them
    flat.skew_ns = skew
    return flat


def _seconds(attributes: Mapping[str, AttrValue], key: str) -> float | None:
    value = attributes.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def _add_phases(flat: Flat, index: int, table: StageTable) -> None:
    """`attribution._expand_vllm`: vLLM's phases as children of node `index`."""
    span = flat.spans[index]
    assert span is not None
    attributes = span.attributes
    ttft = _seconds(attributes, VLLM_LATENCY_TTFT)
    if ttft is None:
        return
    queue = _seconds(attributes, VLLM_LATENCY_QUEUE) or 0.0
    prefill = _seconds(attributes, VLLM_LATENCY_PREFILL)
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
            name = _PHASES[n]
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
                value = attributes.get(key)
                if value is None:
                    continue
                if not (isinstance(value, int | float) and not isinstance(value, bool)) or (
                    value < 0
                ):
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
