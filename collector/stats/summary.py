"""Exact percentiles and the per-stage summary, defined once for the verdict API's
`/api/summary`, the load-test report, `check` and their tests."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..judging.verdict import Status

__all__ = ["PERCENTILES", "StageSummary", "percentile"]

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


@dataclass(frozen=True, slots=True)
class StageSummary:
    """One stage's (or the time to first token's) times over many traces: how many were
    measured, p50/p90/p95/p99/max in ms, and the share of them over the limit.

    Over the limit means what it means in a verdict: the status `overrun` (DESIGN §5
    rule 6), judged against the limit that applied to that trace. Everything but `count` is
    None when nothing was measured; `over_limit_share` is also None for times that have no
    limit (the client's own measurements in a load-test report).
    """

    count: int
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    over_limit_share: float | None

    @classmethod
    def of(cls, results: Iterable[tuple[float | None, Status]]) -> StageSummary:
        """From `(ms, status)` of each trace; unmeasured ones (ms None) do not count."""
        measured = [(ms, status) for ms, status in results if ms is not None]
        over = sum(1 for _, status in measured if status is Status.OVERRUN)
        summary = cls.of_times([ms for ms, _ in measured])
        if not measured:
            return summary
        return cls(**{**summary.to_dict(), "over_limit_share": over / len(measured)})

    @classmethod
    def of_times(cls, values: Iterable[float]) -> StageSummary:
        """Times that are judged against no limit."""
        ordered = sorted(values)
        if not ordered:
            return cls(0, None, None, None, None, None, None)
        p50, p90, p95, p99 = (percentile(ordered, q) for q in PERCENTILES)
        return cls(len(ordered), p50, p90, p95, p99, ordered[-1], None)

    def to_dict(self) -> dict[str, Any]:
        """`count`, `p50_ms` … `p99_ms`, `max_ms`, `over_limit_share`: the keys of
        `/api/summary` and of `report.json` alike."""
        return {
            "count": self.count,
            "p50_ms": self.p50_ms,
            "p90_ms": self.p90_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
            "max_ms": self.max_ms,
            "over_limit_share": self.over_limit_share,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StageSummary:
        return cls(
            count=int(data["count"]),
            p50_ms=data["p50_ms"],
            p90_ms=data["p90_ms"],
            p95_ms=data["p95_ms"],
            p99_ms=data["p99_ms"],
            max_ms=data["max_ms"],
            over_limit_share=data["over_limit_share"],
        )
