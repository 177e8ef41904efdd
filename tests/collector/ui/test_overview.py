"""The overview's over-time slices follow the traces, not the range, and its latest
overruns say how far over each blamed stage went."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.ui.overview import MAX_SLICES, excesses, slices_for

from tests.collector.ui.test_aggregates import BUDGET
from tests.support.traces import rag_trace

T0 = 1_764_936_000.0  # a round hour
WHEN = datetime.fromtimestamp(T0, UTC)


def test_a_short_run_in_a_long_range_gets_slices_of_seconds() -> None:
    """174 traces over 30 s (the demo's run) in the 1 h range: slices of 30 s hold ~59."""
    slices = slices_for(T0 + 7, T0 + 37, 174, per_slice=59)
    assert (slices.width, slices.start, slices.count) == (15.0, T0, 3)
    assert slices.describe() == "15 s"
    assert slices.start <= T0 + 7
    assert slices.end > T0 + 37


@pytest.mark.parametrize(
    ("span_s", "traces", "width"),
    [
        (3600, 100_000, 120.0),  # busy hour: the 36-slice cap decides
        (3600, 600, 600.0),  # quiet hour: 59 traces a slice decide
        (7 * 86400, 10**7, 21600.0),
        (40 * 86400, 10**7, 86400.0 * 2),  # beyond a day: whole days
        (0, 1, 60.0),  # a single trace: one slice
    ],
)
def test_slices_are_round_at_most_36_and_hold_enough_traces(
    span_s: float, traces: int, width: float
) -> None:
    slices = slices_for(T0, T0 + span_s, traces, per_slice=59)
    assert slices.width == width
    assert 1 <= slices.count <= MAX_SLICES + 1
    assert slices.start % width == 0
    assert slices.start <= T0 < T0 + span_s < slices.end or span_s == 0


def test_the_excess_of_each_blamed_stage() -> None:
    evaluator = Evaluator(BUDGET)
    # retrieval 18 + 40 = 58 ms against its 40 ms limit, prefill 98 + 30 against 120.
    over = evaluator.evaluate(rag_trace(retrieval=40, prefill=30).spans, evaluated_at=WHEN)
    assert over is not None
    assert excesses(over.to_dict()) == [("retrieval", 18.0, "limit"), ("prefill", 8.0, "limit")]
    # Only the total over its limit: the stages are blamed for their distance past target.
    stages = tuple(
        replace(s, target_ms=10.0) if s.name == "retrieval" else s for s in BUDGET.stages
    )
    tight = replace(BUDGET, total_target_ms=100.0, total_limit_ms=130.0, stages=stages)
    total_only = Evaluator(tight).evaluate(rag_trace().spans, evaluated_at=WHEN)
    assert total_only is not None
    assert total_only.overrun_ms > 0
    said = excesses(total_only.to_dict())
    assert said
    assert all(mark == "target" for _, _, mark in said)
    assert said == [("retrieval", 8.0, "target")]  # 18 ms against a 10 ms target
