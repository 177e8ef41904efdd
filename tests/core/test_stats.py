"""Percentiles agree with numpy's default (linear) method on the same data."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spanbudget.collector.stats import percentile, percentiles

values = st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=300)


@given(values, st.floats(min_value=0, max_value=100))
def test_percentile_matches_numpy(data: list[float], q: float) -> None:
    ours = percentile(sorted(data), q)
    assert ours == float(np.percentile(data, q))  # bit for bit


def test_summary_and_edges() -> None:
    assert percentiles([]) is None
    summary = percentiles([4.0, 1.0, 3.0, 2.0])
    assert summary is not None
    assert summary == pytest.approx({"p50": 2.5, "p90": 3.7, "p95": 3.85, "p99": 3.97, "max": 4.0})
    assert summary["p95"] == float(np.percentile([1.0, 2.0, 3.0, 4.0], 95))
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
