"""The rules that turn attributed nanoseconds into a verdict's figures (DESIGN §5.6–7, §6):
rounding to 0.01 ms, largest-remainder apportioning, status bands, blame, and the
attributes a verdict carries. Pure; shared by the evaluator's Python paths and its compiled
one (`_judge.pyx`, which keeps C copies only of `band`, of `round_ms`'s integer branch and
of `apportion`, over its own arrays).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..annotations import LOADTEST_PREFIX
from ..spans import AttrValue
from .verdict import StageResult, Status

__all__ = [
    "EXACT_BELOW_NS",
    "HALF_UNIT_NS",
    "UNIT_NS",
    "apportion",
    "band",
    "blame",
    "carried_attributes",
    "round_ms",
]

NS_PER_MS = 1_000_000
UNIT_NS = 10_000  # verdict times are rounded to 0.01 ms
HALF_UNIT_NS = UNIT_NS // 2
EXACT_BELOW_NS = 10**15  # where `round_ms` may use integers (about 11 days)
# Enum members read through the class cost a metaclass look-up each; the hot path reads
# these module constants instead.
_OK, _WARN, _OVERRUN = Status.OK, Status.WARN, Status.OVERRUN


def band(ms: float, target: float, limit: float) -> Status:
    """ok ≤ target < warn ≤ limit < overrun."""
    if ms <= target:
        return _OK
    return _WARN if ms <= limit else _OVERRUN


def round_ms(ns: int) -> float:
    """`round(ns / 1e6, 2)`, bit for bit, in integer arithmetic where that is exact.

    Away from a tie (a remainder of exactly half a unit) and below 10**15 ns, the float
    `ns / 1e6` lies too close to the exact quotient for rounding to tell them apart, and
    `units / 100` is the float nearest to the decimal result, as `round` returns. It takes
    a third of `round`'s time, and a verdict rounds about 25 times.
    """
    if 0 <= ns < EXACT_BELOW_NS and ns % UNIT_NS != HALF_UNIT_NS:
        return ((ns + HALF_UNIT_NS) // UNIT_NS) / 100
    return round(ns / NS_PER_MS, 2)


def apportion(parts_ns: list[int], total_ns: int) -> list[float]:
    """Round parts to 0.01 ms so that they still add up to the rounded total exactly: the
    total as `round_ms` shows it (the verdict's `ttft_ms`), ties included.

    Largest-remainder rounding: each part is floored to whole units, and the units left
    over go to the parts with the largest remainders, the first of equals first.
    """
    total_units = round(round_ms(total_ns) * 100)
    floors = [part // UNIT_NS for part in parts_ns]
    left = total_units - sum(floors)
    order = sorted(range(len(parts_ns)), key=lambda i: parts_ns[i] % UNIT_NS, reverse=True)
    for i in order[: max(0, left)]:
        floors[i] += 1
    return [units / 100 for units in floors]


def blame(results: Sequence[StageResult], total: Status) -> tuple[str, ...]:
    """Stages over their limit, largest excess first; if only the total overran, the
    stages over their target, furthest first (file order breaks ties)."""
    over_limit = [
        (r.ms - r.limit_ms, i, r.name)
        for i, r in enumerate(results)
        if r.ms is not None and r.status is _OVERRUN
    ]
    if over_limit:
        return tuple(name for _, _, name in sorted(over_limit, key=lambda t: (-t[0], t[1])))
    if total is _OVERRUN:
        over_target = [
            (r.ms - r.target_ms, i, r.name)
            for i, r in enumerate(results)
            if r.ms is not None and r.ms > r.target_ms
        ]
        return tuple(name for _, _, name in sorted(over_target, key=lambda t: (-t[0], t[1])))
    return ()


# What a carried attribute may be. A tuple, not `str | int | float | bool`: `isinstance`
# takes it in half the time, and this runs on every trace the collector judges.
_CARRIED = (str, int, float, bool)


def carried_attributes(
    root_attributes: Mapping[str, AttrValue],
) -> dict[str, str | int | float | bool]:
    """Load-test ids from the root (the model and tokens come from the LLM call, after:
    `requests.settle`)."""
    out: dict[str, str | int | float | bool] = {}
    for key, value in root_attributes.items():
        if key.startswith(LOADTEST_PREFIX) and isinstance(value, _CARRIED):
            out[key] = value
    return out
