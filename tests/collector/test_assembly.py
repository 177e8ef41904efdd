"""Tail-based assembly: decision wait after the root, max age, bounds, duplicates, late spans."""

from __future__ import annotations

from dataclasses import replace

from spanbudget.collector.live.assembly import Assembly
from spanbudget.testing.traces import rag_trace


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
    assembly.add(spans[1:6], None, now=0.0)  # no root yet
    assert assembly.due(10.0) == []  # quiet but rootless: waits for max_age
    assembly.add(spans[:1], None, now=11.0)  # the root
    assembly.add(spans[6:], None, now=12.0)
    assert assembly.due(13.9) == []
    (due,) = assembly.due(14.0)
    assert due.reason == "complete"
    assert sorted(s.span_id for s in due.spans) == sorted(s.span_id for s in spans)
    assert len(assembly) == 0
    assert assembly.span_count == 0


def test_a_trace_without_root_is_decided_at_max_age() -> None:
    spans = rag_trace(trace_id="b" * 32).spans[1:]
    assembly = _assembly()
    assembly.add(spans, None, now=0.0)
    assert assembly.due(29.9) == []
    assert assembly.next_deadline() == 30.0
    (due,) = assembly.due(30.0)
    assert due.reason == "max_age"
    # A span that keeps arriving does not extend max_age.
    assembly.add([replace(spans[0], trace_id="c" * 32)], None, now=31.0)
    for t in range(32, 61):
        assembly.add([replace(spans[t % 5], trace_id="c" * 32, span_id=f"{t:016x}")], None, t)
    assert [d.reason for d in assembly.due(61.0)] == ["max_age"]


def test_duplicates_are_dropped_and_late_spans_come_back_with_their_payload() -> None:
    spans = rag_trace(trace_id="d" * 32).spans
    assembly = _assembly(decision_wait=0.0)
    result = assembly.add(spans + spans[:3], list(range(len(spans) + 3)), now=0.0)
    assert result.duplicates == 3
    (due,) = assembly.due(0.0)
    assert len(due.spans) == len(spans)
    assert due.payloads == list(range(len(spans)))
    late = assembly.add([replace(spans[2], span_id="e" * 16)], ["p"], now=1.0)
    assert [(s.span_id, p) for s, p in late.late] == [("e" * 16, "p")]
    assert len(assembly) == 0


def test_bounds_evict_the_oldest_trace_and_cap_spans_per_trace() -> None:
    assembly = _assembly(max_traces=3, max_spans_per_trace=4, decided_memory=1)
    evicted = []
    for n in range(5):
        result = assembly.add(rag_trace(trace_id=f"{n:032x}").spans, None, now=float(n))
        assert result.over_trace_limit == len(rag_trace().spans) - 4
        evicted += [e.trace_id for e in result.evicted]
    assert evicted == [f"{0:032x}", f"{1:032x}"]
    assert len(assembly) == 3
    assert assembly.span_count == 12
    # Decided-trace memory is bounded too: the oldest decided id is forgotten.
    late = assembly.add(rag_trace(trace_id=f"{0:032x}").spans[:1], None, now=6.0)
    assert late.late == []
    assert len(assembly) == 3  # trace 0 came back as new, evicting trace 2


def test_total_spans_held_are_bounded() -> None:
    per_trace = len(rag_trace().spans)
    assembly = _assembly(max_spans=3 * per_trace)
    evicted = []
    for n in range(5):
        result = assembly.add(rag_trace(trace_id=f"{n:032x}").spans, None, now=float(n))
        evicted += [(e.trace_id, e.reason, len(e.spans)) for e in result.evicted]
    assert assembly.span_count == 3 * per_trace
    assert evicted == [(f"{n:032x}", "evicted", per_trace) for n in (0, 1)]
