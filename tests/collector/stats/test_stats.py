"""Percentiles agree with numpy's default (linear) method on the same data, the stage
summary counts over the limit by the verdicts' status, and the intervals hold what they
state: Wilson's against published values, the percentiles' by simulated coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from spanbudget.collector.judging.verdict import Status
from spanbudget.collector.stats import (
    PERCENTILES,
    StageSummary,
    enough_for,
    min_count,
    percentile,
    quantile_interval,
    wilson_interval,
)

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


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [  # Newcombe (1998), Statistics in Medicine 17:857, table I, method 3 (Wilson, no CC)
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_interval_matches_published_values(
    successes: int, n: int, low: float, high: float
) -> None:
    assert wilson_interval(successes, n) == pytest.approx((low, high), abs=1e-4)


def test_wilson_interval_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(17, 17)[1] == 1.0
    low, high = wilson_interval(16, 17)  # a 17-request run with one overrun: 94.1 %
    assert low < 0.75
    assert high > 0.98
    with pytest.raises(ValueError, match="within"):
        wilson_interval(3, 2)


def test_min_count_is_where_the_largest_value_bounds_the_percentile() -> None:
    assert [min_count(q) for q in PERCENTILES] == [5, 29, 59, 299]
    for q in PERCENTILES:
        n = min_count(q)
        assert (q / 100) ** n <= 0.05 < (q / 100) ** (n - 1)
    assert not enough_for(99, 17)
    assert enough_for(99, 299)
    assert enough_for(50, 5)


def test_quantile_interval_covers_the_true_percentile_at_least_as_often_as_stated() -> None:
    """Exponential samples, whose p95 is known exactly: the interval holds it in at least
    95 % of 2,000 seeded draws (an exact method errs on the side of wider)."""
    rng = np.random.default_rng(7)
    true_p95 = -math.log(0.05)
    for n in (60, 200):
        covered = 0
        for _ in range(2000):
            low, high = quantile_interval(sorted(rng.exponential(size=n).tolist()), 95)
            covered += low <= true_p95 and (high is None or true_p95 <= high)
        assert 0.95 <= covered / 2000 <= 0.99


def test_quantile_interval_known_ranks_and_unbounded_ends() -> None:
    values = [float(v) for v in range(1, 201)]
    assert quantile_interval(values, 50) == (86.0, 115.0)  # n/2 ± 1.96·√n/2, by ranks
    assert quantile_interval(values, 99) == (195.0, None)  # 200 values cannot bound a p99
    assert quantile_interval([float(v) for v in range(1, 18)], 99)[1] is None
    assert quantile_interval([5.0, 6.0], 1)[0] == 0.0  # nothing bounds a p1 from below
