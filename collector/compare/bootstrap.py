"""How sure a difference between two sides is: a seeded bootstrap over requests.

Each side's requests are drawn again with replacement, `resamples` times, each side on its
own (the two runs are independent); every statistic is computed on each redraw and the
candidate's minus the base's taken. The interval is the percentile interval of those
differences (Efron & Tibshirani, ch. 13). The same seed and counts give the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["STATISTICS", "Interval", "bootstrap_differences"]

# What is compared, in this order: the percentiles of the ms, then the share over the limit.
STATISTICS = ("p50", "p95", "p99", "over")
_QUANTILES = (0.50, 0.95, 0.99)
_CHUNK = 4_000_000  # values drawn at once: bounds memory on long windows


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def _redraws(
    values: npt.NDArray[np.float64], rng: np.random.Generator, resamples: int
) -> npt.NDArray[np.float64]:
    """(resamples, 4): p50, p95, p99 of the ms and the share over the limit, per redraw.
    `values` is (n, 2): the ms and 1.0 when over the limit."""
    n = len(values)
    out = np.empty((resamples, len(STATISTICS)))
    step = max(1, _CHUNK // max(n, 1))
    for start in range(0, resamples, step):
        count = min(step, resamples - start)
        picked = values[rng.integers(0, n, size=(count, n))]
        out[start : start + count, :3] = np.quantile(
            picked[:, :, 0], _QUANTILES, axis=1, method="linear"
        ).T
        out[start : start + count, 3] = picked[:, :, 1].mean(axis=1)
    return out


def bootstrap_differences(
    base: tuple[Sequence[float], Sequence[bool]],
    candidate: tuple[Sequence[float], Sequence[bool]],
    *,
    resamples: int,
    seed: int,
    stream: int,
    confidence: float,
) -> dict[str, Interval]:
    """Per statistic of `STATISTICS`, the `confidence` interval of candidate minus base.
    Each side is (ms, over the limit) per request, neither empty. `stream` tells the
    stages apart: each draws from its own stream of `seed`, so adding a stage to a budget
    does not move the others' intervals."""
    if not base[0] or not candidate[0]:
        raise ValueError("a bootstrap needs values on both sides")
    rng_base = np.random.default_rng([seed, stream, 0])
    rng_cand = np.random.default_rng([seed, stream, 1])
    a = np.column_stack([np.asarray(base[0], float), np.asarray(base[1], float)])
    b = np.column_stack([np.asarray(candidate[0], float), np.asarray(candidate[1], float)])
    diffs = _redraws(b, rng_cand, resamples) - _redraws(a, rng_base, resamples)
    tail = (1 - confidence) / 2
    lows = np.quantile(diffs, tail, axis=0, method="linear")
    highs = np.quantile(diffs, 1 - tail, axis=0, method="linear")
    return {
        name: Interval(float(lo), float(hi))
        for name, lo, hi in zip(STATISTICS, lows, highs, strict=True)
    }
