"""One trace's spans with some stages made faster or slower: the what-if rule. Pure.

The rule, in DESIGN §5's terms (docs/whatif.md has it with examples):

1. Tree: as rule 1 has it: the root the judging found, a span whose parent is missing
   hangs under it, a duplicate span id counts once. Times are the spans' own (rule 3's
   skew shifts and streamed-response reach are applied afterwards, by the judging).
2. Which spans a change touches: every span whose stage is the changed one by rule 4
   (a span a selector of the stage matches, and every span below it that no selector
   claims for another stage: the blocks the verdict charges to the stage). vLLM's
   `llm_request` is one such span; its phases (rule 2's expansion) change with it.
3. A span's own time is scaled by its stage's factor (1 for an unchanged stage): every
   instant inside a span waits on the latest of the span's start, the ends of its
   children that ended at or before that instant, and the first tokens seen inside its
   children (a child's own first-token mark, or else the earliest one below it) at or
   before that instant. It is placed at the latest of those, moved, plus the span's
   factor times the gap it had to it. The instants so placed are each child's start, the
   span's end, its first-token marks (`gen_ai.response.time_to_first_chunk`, vLLM's
   `gen_ai.latency.time_to_first_token`, any attribute mark of the budget: seconds after
   the span's start, or after its anchor child's end) and its events. Hence: children
   and their subtrees move with the span, a later sibling waits on every earlier one that
   ended at or before its start (a faster span beside an unchanged longer one moves
   nothing; a slower one that now ends last delays it), a parent's end moves with its
   last child, a first token travels out through every span around it, and so on up to
   the root. A child that outlives its parent (an async call, a streamed response) does
   not hold the parent's end.
4. vLLM's phases: `time_in_model_prefill` and `time_in_queue` are the lengths of the
   intervals before `time_to_first_token`; their ends are placed as instants of the
   request span, and the attributes rewritten from the new instants. Other latency
   attributes are left as they were (the judging reads none of them).
5. A shift of d ms on a stage is the scale (E + d) / E in a trace where the stage took
   E ms on the critical path (E from its verdict before), at least 0: when the critical
   path keeps its course the stage's time changes by exactly d. Where E is 0 (the stage
   is absent from the trace or off its critical path) a shift changes nothing there;
   a scale still does (a parallel branch made slower may take over the path).

Then the changed spans are judged again by the same evaluator, as any trace is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spanbudget.common.semconv import (
    GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
    GEN_AI_LATENCY_TIME_IN_QUEUE,
    GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN,
)

from ..budget.model import FirstTokenMark, Selector
from ..spans import AttrValue, Span, SpanEvent, seconds_value

__all__ = ["retime"]

_NS_PER_S = 1e9


@dataclass(slots=True, eq=False)
class _Item:
    span: Span
    factor: float
    children: list[_Item] = field(default_factory=list)
    new_start: int = 0
    new_end: int = 0
    # The first token seen in this subtree: (old instant, new instant), or None.
    first_token: tuple[int, int] | None = None
    attributes: dict[str, AttrValue] | None = None  # rewritten marks, when any
    events: tuple[SpanEvent, ...] | None = None


class _Clock:
    """The instants a span's points wait on: (old, new) pairs, in no particular order."""

    __slots__ = ("factor", "waits")

    def __init__(self, old_start: int, new_start: int, factor: float) -> None:
        self.waits: list[tuple[int, int]] = [(old_start, new_start)]
        self.factor = factor

    def place(self, instant: int) -> int:
        """The new time of an instant of the span (rule 3)."""
        old_latest, new_latest = self.waits[0]
        for old, new in self.waits[1:]:
            if old <= instant:
                if old > old_latest:
                    old_latest = old
                if new > new_latest:
                    new_latest = new
        return new_latest + round(self.factor * (instant - old_latest))


def _tree(spans: Sequence[Span], root_id: str, factor_of: Mapping[str, float]) -> _Item:
    by_id: dict[str, _Item] = {}
    for span in spans:
        if span.span_id not in by_id:
            by_id[span.span_id] = _Item(span, factor_of.get(span.span_id, 1.0))
    root = by_id[root_id]
    attached = {root_id}
    for item in by_id.values():
        parent_id = item.span.parent_span_id
        if item.span.span_id == root_id:
            continue
        parent = by_id.get(parent_id) if parent_id is not None else None
        if parent is None or parent_id == item.span.span_id:
            parent = root
        parent.children.append(item)
    # Spans in a parent cycle never reach the root: hang them under it (rule 1).
    stack = [root]
    while stack:
        for kid in stack.pop().children:
            attached.add(kid.span.span_id)
            stack.append(kid)
    for item in by_id.values():
        if item.span.span_id not in attached:
            parent_id = item.span.parent_span_id
            parent = by_id.get(parent_id) if parent_id is not None else None
            if parent is not None and item in parent.children:
                parent.children.remove(item)
            root.children.append(item)
            attached.add(item.span.span_id)
            stack = [item]
            while stack:
                for kid in stack.pop().children:
                    attached.add(kid.span.span_id)
                    stack.append(kid)
    return root


def _anchor_child(item: _Item, anchor: Selector) -> _Item | None:
    """The latest-starting child matching a mark's anchor (as the evaluator picks it)."""
    found: _Item | None = None
    for kid in item.children:
        s = kid.span
        if (
            anchor.matches_shape(s.name, s.kind, s.service, False)
            and anchor.matches_attributes(s.attributes)
            and (found is None or (s.start_ns, s.end_ns) > (found.span.start_ns, found.span.end_ns))
        ):
            found = kid
    return found


def _carries(mark: FirstTokenMark, span: Span, is_root: bool) -> bool:
    return not mark.match or any(
        sel.matches_shape(span.name, span.kind, span.service, is_root)
        and sel.matches_attributes(span.attributes)
        for sel in mark.match
    )


def _place(item: _Item, new_start: int, marks: Sequence[FirstTokenMark], is_root: bool) -> None:
    """Place a span and its subtree once the span starts at `new_start` (rule 3)."""
    # Explicit stack: deep traces must not hit Python's recursion limit. A frame is a span
    # whose children are being placed, its clock, and the index of the next child.
    frames: list[tuple[_Item, _Clock, int, bool]] = []
    item.new_start = new_start
    item.children.sort(key=lambda k: (k.span.start_ns, k.span.end_ns, k.span.span_id))
    frames.append((item, _Clock(item.span.start_ns, new_start, item.factor), 0, is_root))
    while frames:
        current, clock, index, root = frames.pop()
        if index:  # the child placed last is done: later instants may wait on it
            done = current.children[index - 1]
            clock.waits.append((done.span.end_ns, done.new_end))
            if done.first_token is not None:
                clock.waits.append(done.first_token)
        if index < len(current.children):
            kid = current.children[index]
            frames.append((current, clock, index + 1, root))
            kid.new_start = clock.place(kid.span.start_ns)
            kid.children.sort(key=lambda k: (k.span.start_ns, k.span.end_ns, k.span.span_id))
            frames.append((kid, _Clock(kid.span.start_ns, kid.new_start, kid.factor), 0, False))
            continue
        _finish(current, clock, marks, root)


def _finish(item: _Item, clock: _Clock, marks: Sequence[FirstTokenMark], is_root: bool) -> None:
    span = item.span
    item.new_end = max(item.new_start, clock.place(span.end_ns))
    attributes = dict(span.attributes)
    own_first: tuple[int, int] | None = None
    changed = False
    for mark in marks:
        if mark.attribute is None:
            continue
        value = seconds_value(span.attributes.get(mark.attribute))
        if value is None:
            continue
        if mark.anchor is None:
            base_old, base_new = span.start_ns, item.new_start
        else:
            anchor = _anchor_child(item, mark.anchor)
            if anchor is None:
                continue
            base_old, base_new = anchor.span.end_ns, anchor.new_end
        old = base_old + round(value * _NS_PER_S)
        new = max(base_new, clock.place(old))
        if new - base_new != old - base_old:  # else kept as written, to the last bit
            attributes[mark.attribute] = (new - base_new) / _NS_PER_S
            changed = True
        if own_first is None and _carries(mark, span, is_root):
            own_first = (old, new)
    ttft = seconds_value(span.attributes.get(GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN))
    if ttft is not None:  # vLLM's phases end at its first token (rule 4 of the module)
        first_old = span.start_ns + round(ttft * _NS_PER_S)
        first_new = clock.place(first_old)
        if first_new - item.new_start != first_old - span.start_ns:
            attributes[GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN] = (
                max(0, first_new - item.new_start) / _NS_PER_S
            )
            changed = True
        prefill = seconds_value(span.attributes.get(GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL))
        queue = seconds_value(span.attributes.get(GEN_AI_LATENCY_TIME_IN_QUEUE))
        prefill_old = first_old - round((prefill or 0.0) * _NS_PER_S)
        prefill_new = clock.place(prefill_old)
        if prefill is not None and first_new - prefill_new != first_old - prefill_old:
            attributes[GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL] = (
                max(0, first_new - prefill_new) / _NS_PER_S
            )
            changed = True
        if queue is not None:
            queue_old = prefill_old - round(queue * _NS_PER_S)
            queue_new = clock.place(queue_old)
            if prefill_new - queue_new != prefill_old - queue_old:
                attributes[GEN_AI_LATENCY_TIME_IN_QUEUE] = (
                    max(0, prefill_new - queue_new) / _NS_PER_S
                )
                changed = True
    if changed:
        item.attributes = attributes
    if span.events:
        placed = tuple(SpanEvent(e.name, clock.place(e.time_ns)) for e in span.events)
        item.events = placed if placed != span.events else None
        placed_events = placed
        for mark in marks:
            if mark.attribute is None and own_first is None and _carries(mark, span, is_root):
                hit = next(
                    (
                        (old.time_ns, new.time_ns)
                        for old, new in zip(span.events, placed_events, strict=True)
                        if old.name in mark.events
                    ),
                    None,
                )
                if hit is not None:
                    own_first = hit
    if own_first is not None:
        item.first_token = own_first
    else:
        seen = [kid.first_token for kid in item.children if kid.first_token is not None]
        item.first_token = min(seen) if seen else None


def retime(
    spans: Sequence[Span],
    root_span_id: str,
    factor_of: Mapping[str, float],
    marks: Sequence[FirstTokenMark],
) -> list[Span]:
    """The trace's spans, each moved by the rule above (the module's docstring).

    `root_span_id` is the root the judging found (rule 1); `factor_of` maps a span id to
    the factor of its stage (rule 2; spans not in it keep their own time); `marks` are the
    budget's first-token marks. The spans come back in their order, duplicates included.
    """
    if not spans:
        return []
    root = _tree(spans, root_span_id, factor_of)
    _place(root, root.span.start_ns, marks, True)
    placed: dict[str, _Item] = {}
    stack = [root]
    while stack:
        item = stack.pop()
        placed[item.span.span_id] = item
        stack.extend(item.children)
    out: list[Span] = []
    for span in spans:
        item = placed[span.span_id]
        changes: dict[str, object] = {"start_ns": item.new_start, "end_ns": item.new_end}
        if item.attributes is not None:
            changes["attributes"] = item.attributes
        if item.events is not None:
            changes["events"] = item.events
        out.append(dataclasses.replace(span, **changes))  # type: ignore[arg-type]
    return out
