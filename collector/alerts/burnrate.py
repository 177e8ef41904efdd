"""Burn rates of a budget's stages over rolling windows, and the SRE workbook's rules. Pure.

For each stage (and the total) the error rate is the share of judged traces over that
stage's limit; the burn rate is that share divided by the error budget, 1 - objective.
A rule burns when both its long and its short window burn at or above its factor; it
fires once it has burned for `for_s` without a break, and resolves once it has stayed
under for `keep_firing_s` (the engine keeps that state, see `engine.py`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..budget.model import Budget
from ..judging.verdict import Status, Verdict

__all__ = [
    "DEFAULT_RULES",
    "TOTAL",
    "BurnRule",
    "BurnWindows",
    "RollingCounts",
    "WindowBurn",
    "human_duration",
    "over_limit",
]

TOTAL = "total"  # the pseudo-stage for the whole time to first token


@dataclass(frozen=True, slots=True)
class BurnRule:
    """One multi-window rule: `factor` over both windows, for `for_s`, held `keep_firing_s`."""

    severity: str
    factor: float
    long_s: float
    short_s: float
    for_s: float = 0.0  # burning this long without a break before it fires (Prometheus `for`)
    keep_firing_s: float = 0.0  # under this long before it resolves (`keep_firing_for`)

    def scaled(self, scale: float) -> BurnRule:
        """Every duration times `scale`: the windows, the pending time and the hold."""
        return BurnRule(
            self.severity,
            self.factor,
            self.long_s * scale,
            self.short_s * scale,
            self.for_s * scale,
            self.keep_firing_s * scale,
        )

    def describe(self) -> str:
        long, short = human_duration(self.long_s), human_duration(self.short_s)
        return f"{self.factor:g}x over {long} and {short}"


# The windows and factors are the SRE workbook's (chapter 5, "Alerting on SLOs", table 5-8).
# Its recommended rules carry no `for`, and neither do the rules Sloth generates: both rely
# on the short window alone. Pyrra's do (slo/rules.go, `Windows`, for a 28-day objective):
# `for: 2m` on 14x over 1h/5m, `15m` on 7x over 6h/30m, `1h` on 2x over 1d/2h and `3h` on
# 1x over 4d/6h, "half short" -- about half the short window. We take Pyrra's `for` for the
# workbook's windows (3h for the ticket, whose short window is Pyrra's 6h), and hold a
# firing rule as long before it resolves, so that it flaps neither way. The same values are
# in prometheus/budget-alerts.yml (`for`, `keep_firing_for`); tests/deploy checks they agree.
DEFAULT_RULES = (
    BurnRule("page", 14.4, 3600, 300, for_s=120, keep_firing_s=120),
    BurnRule("page", 6.0, 6 * 3600, 1800, for_s=900, keep_firing_s=900),
    BurnRule("ticket", 1.0, 3 * 86400, 6 * 3600, for_s=3 * 3600, keep_firing_s=3 * 3600),
)


class WindowBurn(NamedTuple):
    """One stage over one window: its burn rate and the counts behind it."""

    burn: float
    judged: int  # judged traces in the window
    over: int  # of which over the stage's limit


def human_duration(seconds: float) -> str:
    """`3600` reads `1h`, `300` reads `5m`, `1.5` reads `1.5s`."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def over_limit(verdict: Verdict) -> set[str]:
    """The stages (and `total`) of a verdict that went over their limits."""
    names = {s.name for s in verdict.stages if s.status is Status.OVERRUN}
    if verdict.total_status is Status.OVERRUN:
        names.add(TOTAL)
    return names


class RollingCounts:
    """Judged and over-limit counts per stage over one window, in `buckets` time slices.

    The window slides a slice at a time, so the counts cover between `window` and
    `window + window/buckets` seconds: coarse enough to stay cheap over three days,
    fine enough for alerting.
    """

    def __init__(self, window_s: float, stages: Iterable[str], buckets: int = 60) -> None:
        self.window_s = window_s
        self.slice_s = window_s / buckets
        self.stages = list(stages)
        self._slices: deque[tuple[int, list[int]]] = deque()  # (slice number, counts)
        self._sums = [0] * (len(self.stages) + 1)  # last entry: judged traces
        self._index = {name: i for i, name in enumerate(self.stages)}

    def _expire(self, now: float) -> None:
        # Keep the current slice and `buckets` whole slices before it, so that everything
        # younger than the window is counted: the current slice is only partly elapsed.
        oldest = math.floor(now / self.slice_s) - math.ceil(self.window_s / self.slice_s) - 1
        while self._slices and self._slices[0][0] <= oldest:
            _, counts = self._slices.popleft()
            for i, count in enumerate(counts):
                self._sums[i] -= count

    def add(self, now: float, over: Iterable[str], traces: int = 1) -> None:
        """`traces` judged traces at `now`; each name in `over` (a name once for each of
        them that went over its limit) counts one over."""
        self._expire(now)
        number = math.floor(now / self.slice_s)
        if not self._slices or self._slices[-1][0] != number:
            self._slices.append((number, [0] * len(self._sums)))
        counts = self._slices[-1][1]
        counts[-1] += traces
        self._sums[-1] += traces
        for name in over:
            i = self._index.get(name)
            if i is not None:
                counts[i] += 1
                self._sums[i] += 1

    def counts(self, now: float, stage: str) -> tuple[int, int]:
        """(traces over the limit, judged traces) in the window ending at `now`."""
        self._expire(now)
        return self._sums[self._index[stage]], self._sums[-1]

    def ratio(self, now: float, stage: str) -> tuple[float, int]:
        """(share over limit, judged traces) in the window ending at `now`."""
        over, judged = self.counts(now, stage)
        return (over / judged if judged else 0.0), judged


class BurnWindows:
    """Every window the rules need, fed with verdicts, asked for burn rates."""

    def __init__(self, budget: Budget, rules: Sequence[BurnRule]) -> None:
        self.stages = [*budget.stage_names(), TOTAL]
        self.error_budget = 1.0 - budget.slo_objective
        lengths = sorted({w for rule in rules for w in (rule.long_s, rule.short_s)})
        self._windows = {w: RollingCounts(w, self.stages) for w in lengths}

    def add_over(self, now: float, over: Iterable[str], traces: int = 1) -> None:
        """One judged trace at `now` that went over the limits of `over` (stages, `total`);
        or `traces` of them, `over` naming each stage once for each trace over its limit."""
        over = tuple(over)
        for window in self._windows.values():
            window.add(now, over, traces)

    @property
    def longest_s(self) -> float:
        return max(self._windows)

    def burn(self, now: float, stage: str, window_s: float) -> WindowBurn:
        """The burn rate of `stage` over the window of `window_s`, with its counts."""
        over, judged = self._windows[window_s].counts(now, stage)
        share = over / judged if judged else 0.0
        return WindowBurn(share / self.error_budget, judged, over)
