"""Open-loop arrival schedules, fixed before the run starts.

Every request has a scheduled send time decided up front, so a stall in the system under
test cannot slow the arrivals down and hide the requests queued behind it (coordinated
omission): latency is measured from the scheduled time as well as from the actual send.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Arrival", "Phase", "build_schedule"]


class Arrival(enum.Enum):
    POISSON = "poisson"  # exponential gaps: independent users
    CONSTANT = "constant"  # evenly spaced: easiest to reason about


@dataclass(frozen=True, slots=True)
class Phase:
    """`rate` requests per second for `duration_s` seconds, or exactly `requests` requests."""

    name: str
    rate: float
    duration_s: float | None = None
    requests: int | None = None

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError(f"phase {self.name!r}: rate must be above 0, got {self.rate}")
        if (self.duration_s is None) == (self.requests is None):
            raise ValueError(f"phase {self.name!r}: give a duration or a request count")


def build_schedule(
    phases: Sequence[Phase], arrival: Arrival, *, seed: int = 0
) -> list[tuple[float, str]]:
    """Scheduled send times in seconds from the run's start, each with its phase's name."""
    rng = random.Random(seed)
    schedule: list[tuple[float, str]] = []
    phase_start = 0.0
    for phase in phases:
        offset = 0.0
        count = 0
        end = phase.duration_s
        while True:
            gap = rng.expovariate(phase.rate) if arrival is Arrival.POISSON else 1.0 / phase.rate
            # The first request of a constant phase goes at its start; Poisson starts with a gap.
            at = offset if (arrival is Arrival.CONSTANT and count == 0) else offset + gap
            if end is not None and at >= end:
                break
            if phase.requests is not None and count >= phase.requests:
                break
            schedule.append((phase_start + at, phase.name))
            offset = at
            count += 1
        phase_start += end if end is not None else offset + 1.0 / phase.rate
    return schedule
