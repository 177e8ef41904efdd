"""How sure a number from few requests is: an interval for a share (Wilson's) and for a
percentile (by order statistics), and the fewest requests a percentile needs.

Every interval is at `CONFIDENCE` unless asked otherwise; the reports say so next to it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CONFIDENCE",
    "SloDecision",
    "SloJudgement",
    "decide_slo",
    "enough_for",
    "judge_slo",
    "min_count",
    "quantile_interval",
    "wilson_interval",
]

CONFIDENCE = 0.95  # of every interval the project states
_Z = {0.9: 1.6448536269514722, 0.95: 1.959963984540054, 0.99: 2.5758293035489004}


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The Wilson score interval of a share seen `successes` times in `n` (Wilson 1927):
    unlike the normal approximation it stays within 0..1 and is honest at 0 % and 100 %,
    which is where SLO shares live. (0, 1) when n is 0: nothing is known."""
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..{n}, got {successes}")
    if n == 0:
        return 0.0, 1.0
    z = _Z[confidence]
    share = successes / n
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def min_count(q: float, confidence: float = CONFIDENCE) -> int:
    """The fewest values whose largest bounds the q-th percentile (0..100) from above with
    `confidence`: with n values all below the true percentile with probability (q/100)^n,
    n must make that at most 1 - confidence. p50: 5, p90: 29, p95: 59, p99: 299."""
    if not 0 < q < 100:
        raise ValueError(f"percentile must be within 0..100 (exclusive), got {q}")
    return math.ceil(math.log(1 - confidence) / math.log(q / 100) - 1e-9)


def enough_for(q: float, n: int, confidence: float = CONFIDENCE) -> bool:
    """Whether n values are enough to state their q-th percentile (see `min_count`); below
    that, reports say "not enough requests" rather than print a number nothing bounds."""
    return n >= min_count(q, confidence)


def quantile_interval(
    sorted_values: Sequence[float], q: float, confidence: float = CONFIDENCE
) -> tuple[float, float | None]:
    """A distribution-free interval for the q-th percentile (0..100) of what the values
    were drawn from: order statistics whose ranks a binomial(n, q/100) puts on either side
    with `confidence` (Hahn & Meeker, ch. 5). The values are durations: the lower end is 0
    when not even the smallest bounds the percentile from below, and the upper end is None
    when not even the largest bounds it from above (too few values for that percentile)."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("interval of no values")
    p = q / 100
    tail = (1 - confidence) / 2
    # cdf[k] = P(Binomial(n, p) <= k), summed in log space so that n may be large.
    log_p, log_q = (math.log(p), math.log1p(-p)) if 0 < p < 1 else (0.0, 0.0)
    cdf: list[float] = []
    total = 0.0
    for k in range(n + 1):
        if p <= 0:
            pmf = 1.0 if k == 0 else 0.0
        elif p >= 1:
            pmf = 1.0 if k == n else 0.0
        else:
            pmf = math.exp(
                math.lgamma(n + 1)
                - math.lgamma(k + 1)
                - math.lgamma(n - k + 1)
                + k * log_p
                + (n - k) * log_q
            )
        total += pmf
        cdf.append(total)
    # The l-th smallest value (1-based) is below the percentile when at least l values are.
    low_rank = max((k for k in range(n + 1) if cdf[k] <= tail), default=-1) + 1
    high_rank = next((k for k in range(n + 1) if cdf[k] >= 1 - tail), n) + 1
    low = sorted_values[low_rank - 1] if low_rank >= 1 else 0.0
    high = sorted_values[high_rank - 1] if high_rank <= n else None
    return low, high


class SloDecision(enum.Enum):
    MET = "met"
    BREACHED = "breached"
    NOT_DECIDED = "not decided"


def decide_slo(
    within: int, n: int, objective: float, confidence: float = CONFIDENCE
) -> SloDecision:
    """Met when the share's whole Wilson interval is at or above the objective, breached
    when it is below, not decided when it straddles it: one overrun in 17 requests is no
    breach of a 95 % objective, nor is 17 of 17 a proof of one met."""
    low, high = wilson_interval(within, n, confidence)
    if n and low >= objective:
        return SloDecision.MET
    if n and high < objective:
        return SloDecision.BREACHED
    return SloDecision.NOT_DECIDED


@dataclass(frozen=True, slots=True)
class SloJudgement:
    """The share within every limit, its Wilson interval and what it decides, for pages."""

    within: int
    n: int
    objective: float
    low: float
    high: float
    decision: SloDecision
    confidence: float = CONFIDENCE

    @property
    def share(self) -> float | None:
        return self.within / self.n if self.n else None


def judge_slo(within: int, n: int, objective: float) -> SloJudgement:
    low, high = wilson_interval(within, n)
    return SloJudgement(within, n, objective, low, high, decide_slo(within, n, objective))
