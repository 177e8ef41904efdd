"""Tail-based assembly: decision wait after the root, max age, bounds, duplicates, late spans,
a restart's hold, a flush that leaves rootless traces held, and traces due in the order
they were last heard from, however their spans interleave."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from spanbudget.collector.core.assembly import Assembly
from spanbudget.collector.core.held import HeldSpan
from spanbudget.collector.spans import Span

from tests.support.traces import rag_trace


def _held(spans: list[Span]) -> list[HeldSpan]:
    return [HeldSpan(span) for span in spans]


def _assembly(**overrides: float) -> Assembly:
    values = {
        "decision_wait": 2.0,
        "max_age": 30.0,
        "max_traces": 100,
        "max_spans_per_trace": 100,
        "decided_memory": 1000,
        **overrides,
    }
    return Assembly(**values)  # type: ignore[arg-type]


def test_a_trace_is_due_decision_wait_after_its_last_span_once_the_root_is_in() -> None:
    spans = rag_trace(trace_id="a" * 32).spans
    assembly = _assembly()
    assembly.add(_held(spans[1:6]), now=0.0)  # no root yet
    assert assembly.due(10.0) == []  # quiet but rootless: waits for max_age
    assembly.add(_held(spans[:1]), now=11.0)  # the root
    assembly.add(_held(spans[6:]), now=12.0)
    assert assembly.due(13.9) == []
    (due,) = assembly.due(14.0)
    assert due.reason == "complete"
    assert sorted(h.span.span_id for h in due.spans) == sorted(s.span_id for s in spans)
    assert len(assembly) == 0
    assert assembly.span_count == 0


def test_a_trace_without_root_is_decided_at_max_age() -> None:
    spans = rag_trace(trace_id="b" * 32).spans[1:]
    assembly = _assembly()
    assembly.add(_held(spans), now=0.0)
    assert assembly.due(29.9) == []
    assert assembly.next_deadline() == 30.0
    (due,) = assembly.due(30.0)
    assert due.reason == "max_age"
    # A span that keeps arriving does not extend max_age.
    assembly.add(_held([replace(spans[0], trace_id="c" * 32)]), now=31.0)
    for t in range(32, 61):
        assembly.add(_held([replace(spans[t % 5], trace_id="c" * 32, span_id=f"{t:016x}")]), t)
    assert [d.reason for d in assembly.due(61.0)] == ["max_age"]


def test_duplicates_are_dropped_and_late_spans_come_back_with_their_original() -> None:
    spans = rag_trace(trace_id="d" * 32).spans
    assembly = _assembly(decision_wait=0.0)
    held = [HeldSpan(span, proto=i) for i, span in enumerate(spans + spans[:3])]
    result = assembly.add(held, now=0.0)
    assert result.duplicates == 3
    (due,) = assembly.due(0.0)
    assert due.spans == held[: len(spans)]  # the first of each, its original beside it
    straggler = HeldSpan(replace(spans[2], span_id="e" * 16), proto="p")
    late = assembly.add([straggler], now=1.0)
    assert late.late == [straggler]
    assert len(assembly) == 0


def test_bounds_evict_the_oldest_trace_and_cap_spans_per_trace() -> None:
    assembly = _assembly(max_traces=3, max_spans_per_trace=4, decided_memory=1)
    evicted = []
    for n in range(5):
        result = assembly.add(_held(rag_trace(trace_id=f"{n:032x}").spans), now=float(n))
        assert result.over_trace_limit == len(rag_trace().spans) - 4
        evicted += [e.trace_id for e in result.evicted]
    assert evicted == [f"{0:032x}", f"{1:032x}"]
    assert len(assembly) == 3
    assert assembly.span_count == 12
    # Decided-trace memory is bounded too: the oldest decided id is forgotten.
    late = assembly.add(_held(rag_trace(trace_id=f"{0:032x}").spans[:1]), now=6.0)
    assert late.late == []
    assert len(assembly) == 3  # trace 0 came back as new, evicting trace 2


def test_total_spans_held_are_bounded() -> None:
    per_trace = len(rag_trace().spans)
    assembly = _assembly(max_spans=3 * per_trace)
    evicted = []
    for n in range(5):
        result = assembly.add(_held(rag_trace(trace_id=f"{n:032x}").spans), now=float(n))
        evicted += [(e.trace_id, e.reason, len(e.spans)) for e in result.evicted]
    assert assembly.span_count == 3 * per_trace
    assert evicted == [(f"{n:032x}", "evicted", per_trace) for n in (0, 1)]


def test_remembered_traces_come_back_as_late() -> None:
    assembly = _assembly(decision_wait=0.0, decided_memory=2)
    assembly.remember([f"{n:032x}" for n in range(3)])  # the oldest is forgotten
    for n in range(3):
        result = assembly.add(_held(rag_trace(trace_id=f"{n:032x}").spans[:2]), now=0.0)
        assert len(result.late) == (0 if n == 0 else 2)
    assert len(assembly) == 1


def test_held_no_trace_is_complete_before_the_hold_ends_and_max_age_still_bounds_it() -> None:
    """After a restart that found traces in flight: a root retried before its children is
    quiet past the decision wait, yet it waits for them until the hold ends."""
    spans = rag_trace(trace_id="d" * 32).spans
    assembly = _assembly(decision_wait=2.0, max_age=30.0)
    assembly.hold(10.0)
    assembly.hold(5.0)  # an earlier end changes nothing
    assembly.add(_held(spans[:1]), now=0.0)  # the root, first
    assert assembly.due(5.0) == []
    assert assembly.next_deadline() == 10.0
    assembly.add(_held(spans[1:]), now=6.0)  # the rest, from the sender's retry
    assert assembly.due(9.9) == []
    (due,) = assembly.due(10.0)
    assert (due.reason, len(due.spans)) == ("complete", len(spans))
    # Once the hold is over, the decision wait alone.
    assembly.add(_held(rag_trace(trace_id="e" * 32).spans), now=11.0)
    assert assembly.next_deadline() == 13.0
    assert [d.trace_id for d in assembly.due(13.0)] == ["e" * 32]
    # A hold longer than the max age: the max age decides.
    assembly.hold(100.0)
    assembly.add(_held(rag_trace(trace_id="f" * 32).spans), now=20.0)
    assert assembly.due(49.9) == []
    assert [(d.trace_id, d.reason) for d in assembly.due(50.0)] == [("f" * 32, "max_age")]


def test_flush_can_leave_the_traces_without_their_root_held() -> None:
    whole = rag_trace(trace_id="1" * 32).spans
    rootless = rag_trace(trace_id="2" * 32).spans[1:]
    assembly = _assembly()
    assembly.add(_held(whole + rootless), now=0.0)
    assert [d.trace_id for d in assembly.flush(rootless=False)] == ["1" * 32]
    assert (len(assembly), assembly.span_count) == (1, len(rootless))
    assert [(d.trace_id, d.reason) for d in assembly.flush()] == [("2" * 32, "flush")]


# A request's spans: (trace, span number, whether it is the root), in order.
_BATCHES = st.lists(
    st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 5), st.booleans()), max_size=12),
    min_size=1,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(_BATCHES)
def test_traces_are_due_in_the_order_they_were_last_heard_from(
    batches: list[list[tuple[str, int, bool]]],
) -> None:
    """Whatever the spans' order (a trace's in a run, or interleaved with others'), the
    count held is the spans taken (no duplicate, at most 4 a trace), and the traces with a
    root come due in the order their last span taken came."""
    assembly = _assembly(decision_wait=1.0, max_spans_per_trace=4)
    taken: dict[str, set[int]] = {}
    rooted: set[str] = set()
    heard: dict[str, int] = {}
    order = 0
    for step, batch in enumerate(batches):
        spans = [
            Span(t * 32, f"{n + 1:016x}", "s", 0, 1, None if root else "f" * 16)
            for t, n, root in batch
        ]
        assembly.add(_held(spans), float(step))
        for t, n, root in batch:
            numbers = taken.setdefault(t, set())
            if n in numbers or len(numbers) >= 4:
                continue
            numbers.add(n)
            rooted |= {t} if root else set()
            heard[t], order = order, order + 1
    assert assembly.span_count == sum(len(numbers) for numbers in taken.values())
    due = [trace.trace_id[0] for trace in assembly.due(len(batches) + 1.0)]
    assert due == sorted(rooted, key=heard.__getitem__)
