"""Percentiles agree with numpy's default (linear) method on the same data, and the stage
summary counts over the limit by the verdicts' status."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spanbudget.collector.judging.verdict import Status
from spanbudget.collector.stats import StageSummary, percentile

values = st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=300)


@given(values, st.floats(min_value=0, max_value=100))
def test_percentile_matches_numpy(data: list[float], q: float) -> None:
    ours = percentile(sorted(data), q)
    assert ours == float(np.percentile(data, q))  # bit for bit


def test_summary_and_edges() -> None:
    assert StageSummary.of_times([]) == StageSummary(0, None, None, None, None, None, None)
    summary = StageSummary.of_times([4.0, 1.0, 3.0, 2.0])
    assert (summary.p50_ms, summary.p90_ms, summary.p95_ms, summary.p99_ms) == pytest.approx(
        (2.5, 3.7, 3.85, 3.97)
    )
    assert summary.p95_ms == float(np.percentile([1.0, 2.0, 3.0, 4.0], 95))
    assert (summary.count, summary.max_ms, summary.over_limit_share) == (4, 4.0, None)
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_over_the_limit_is_the_status_overrun_and_unmeasured_times_do_not_count() -> None:
    results = [
        (10.0, Status.OK),
        (30.0, Status.WARN),
        (50.0, Status.OVERRUN),
        (None, Status.UNMEASURED),
        (0.0, Status.ABSENT),
    ]
    summary = StageSummary.of(results)
    assert summary.count == 4
    assert summary.over_limit_share == 0.25
    assert summary.max_ms == 50.0
    assert StageSummary.of([(None, Status.UNMEASURED)]).over_limit_share is None
    assert StageSummary.from_dict(summary.to_dict()) == summary
    assert list(summary.to_dict()) == [
        "count",
        "p50_ms",
        "p90_ms",
        "p95_ms",
        "p99_ms",
        "max_ms",
        "over_limit_share",
    ]
