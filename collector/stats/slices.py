"""Round time slices over the span of some traces, for figures over time: the overview's
p95 per slice and each stage's share of the budget per slice use the same ones."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["MAX_SLICES", "Slices", "slices_for"]

MAX_SLICES = 36
# Slice widths to pick from, seconds: round ones, so slices line up with the clock
# (…, 10 s, 15 s, 30 s, 1 min, …, 1 h, …, 1 d).
_WIDTHS = (
    *(1, 2, 5, 10, 15, 30),  # seconds
    *(60, 120, 300, 600, 900, 1800),  # minutes
    *(3600, 7200, 10800, 21600, 43200, 86400),  # hours, a day
)


@dataclass(frozen=True, slots=True)
class Slices:
    """`count` slices of `width` seconds from `start`, sized so that each holds on average
    the `per_slice` traces a figure needs."""

    start: float
    width: float
    count: int
    per_slice: int

    @property
    def end(self) -> float:
        return self.start + self.width * self.count

    def starts(self) -> list[float]:
        return [self.start + i * self.width for i in range(self.count)]

    def describe(self) -> str:
        """`15 s`, `5 min`, `1 h`: the width for people."""
        w = int(self.width)
        if w % 3600 == 0:
            return f"{w // 3600} h"
        if w % 60 == 0:
            return f"{w // 60} min"
        return f"{w} s"


def slices_for(
    first: float, last: float, traces: int, *, per_slice: int, max_slices: int = MAX_SLICES
) -> Slices:
    """Slices over the time the traces span (not the whole range asked for: a 30 s run in
    a 1 h range gets slices of seconds, not one of minutes): the narrowest round width that
    gives at most `max_slices` slices and, on average, `per_slice` traces in each; aligned
    to the clock."""
    if max_slices < 1:
        raise ValueError(f"max_slices must be at least 1, got {max_slices}")
    span = max(last - first, 1.0)
    wanted = max(span / max_slices, span * per_slice / max(traces, 1))
    width = next((float(w) for w in _WIDTHS if w >= wanted), float(_WIDTHS[-1]))
    while span / width > max_slices:  # beyond a day's width: whole days
        width += _WIDTHS[-1]
    start = math.floor(first / width) * width
    count = max(1, math.ceil((last - start) / width + 1e-9))
    if start + count * width <= last:  # the last trace sits on the edge: one more slice
        count += 1
    return Slices(start, width, count, per_slice)
