"""Limits that hold the SLO objective jointly, not stage by stage.

A trace is within the budget only when every stage is within its limit and the total is
within its own. Per-stage p95 limits over five stages that vary independently leave about
0.95^5 = 77 % of traces within all of them, not 95 %. So the limits are set at one common
percentile `level` of each stage's exclusive time (and of the time to first token), plus
`HEADROOM`, at least `FLOOR_MS`, rounded up; and `level` is the lowest, from the
objective upwards in steps of 0.1, at which judging the same traces with those numbers
(by the evaluator, exactly as `check` will) leaves at least the objective's share within
every limit. Raising `level` raises every limit, so the share only grows with it and a
bisection finds it. Pure: verdicts and traces in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..stats import percentile

__all__ = ["FLOOR_MS", "HEADROOM", "STEP", "Limits", "find_level", "limits_at"]

HEADROOM = 0.10  # each limit is its percentile plus this share: room for the next run
FLOOR_MS = 1.0  # no limit below this: sub-millisecond stages would flag scheduler noise
STEP = 0.1  # the levels tried: objective, objective + 0.1, ... 100 (percent)


@dataclass(frozen=True, slots=True)
class Limits:
    """The unrounded limits at one level: per stage, and for the time to first token."""

    level: float  # percentile, 0..100
    stages: Mapping[str, float]
    ttft: float


def limits_at(
    level: float,
    stage_values: Mapping[str, Sequence[float]],
    ttft_values: Sequence[float],
    *,
    headroom: float = HEADROOM,
    floor_ms: float = FLOOR_MS,
) -> Limits:
    """Each stage's `level` percentile plus headroom, at least the floor (sorted values)."""

    def limit(values: Sequence[float]) -> float:
        return max(floor_ms, percentile(values, level) * (1 + headroom))

    return Limits(
        level,
        {name: limit(values) for name, values in stage_values.items() if values},
        limit(ttft_values),
    )


def find_level(objective: float, within_at: Callable[[float], int], judged: int) -> float:
    """The lowest level (objective×100, then steps of `STEP`, up to 100) at which
    `within_at(level)` traces of `judged` are within every limit, or 100 when none is
    enough (the suggestion then states the share it reached)."""
    need = math.ceil(objective * judged - 1e-9)
    low_step = 0
    high_step = math.ceil(round((100 - objective * 100) / STEP, 6))

    def level(step: int) -> float:
        return min(100.0, round(objective * 100 + step * STEP, 6))

    if within_at(level(low_step)) >= need:
        return level(low_step)
    if within_at(level(high_step)) < need:
        return 100.0
    while high_step - low_step > 1:  # within_at(low) < need <= within_at(high)
        middle = (low_step + high_step) // 2
        if within_at(level(middle)) >= need:
            high_step = middle
        else:
            low_step = middle
    return level(high_step)
