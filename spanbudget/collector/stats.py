"""Exact percentiles, defined once for the verdict API, the load-test report and their tests."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["PERCENTILES", "percentile", "percentiles"]

PERCENTILES = (50, 90, 95, 99)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of ascending values, interpolated linearly between ranks.

    The same definition and arithmetic as numpy's default (`method="linear"`), so results
    match it bit for bit: rank `(n - 1) * (q / 100)`, then numpy's `_lerp`.
    Raises ValueError on an empty sequence.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    rank = (len(sorted_values) - 1) * (q / 100)
    low = math.floor(rank)
    high = min(low + 1, len(sorted_values) - 1)
    gamma = rank - low
    a, b = sorted_values[low], sorted_values[high]
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def percentiles(values: Sequence[float]) -> dict[str, float] | None:
    """p50, p90, p95, p99 and max of unsorted values, or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    result = {f"p{q}": percentile(ordered, q) for q in PERCENTILES}
    result["max"] = ordered[-1]
    return result
