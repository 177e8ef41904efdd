"""Two sides compared stage by stage: each statistic side by side with its difference and
bootstrap interval, and one verdict per stage (slower, faster, no detectable change).

Many stages are tested at once, and two runs of one build on a shared machine differ for
real (a busy neighbour slows every stage for seconds at a time), so a verdict asks for
two things (`CompareSettings`): it rests on one statistic only (the primary, p50 by
default), and that statistic's whole interval, at a confidence that holds for all stages
together (Bonferroni: each interval at 1 - (1 - confidence) / stages), lies beyond a
minimum effect (in ms and as a share of the base's value): the stage is slower by at
least that much, with that confidence. The other statistics are shown with their
intervals but decide no verdict; `--fail-on` rules may use them.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..stats import enough_for, percentile
from .bootstrap import STATISTICS, Interval, bootstrap_differences
from .samples import TTFT, Side

__all__ = [
    "Change",
    "CompareSettings",
    "Comparison",
    "StageComparison",
    "StatComparison",
    "compare",
]

PERCENTILE_OF = {"p50": 50, "p95": 95, "p99": 99}


class Change(enum.Enum):
    SLOWER = "slower"
    FASTER = "faster"
    NONE = "no detectable change"
    FEW = "too few requests"
    UNMEASURED = "not measured"


@dataclass(frozen=True, slots=True)
class CompareSettings:
    """How sure and how large a change must be to be called one (module docstring)."""

    confidence: float = 0.95  # for all stages' verdicts together
    resamples: int = 2000
    seed: int = 0
    primary: str = "p50"
    min_effect_ms: float = 2.0
    min_effect_share: float = 0.10  # of the base's value of the primary statistic

    def __post_init__(self) -> None:
        if self.primary not in PERCENTILE_OF:
            raise ValueError(f"the primary statistic is one of p50, p95, p99, not {self.primary}")
        if not 0.5 <= self.confidence < 1:
            raise ValueError(f"confidence must be within 0.5..1, got {self.confidence}")
        if self.resamples < 100:
            raise ValueError(f"at least 100 resamples, got {self.resamples}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "confidence": self.confidence,
            "resamples": self.resamples,
            "seed": self.seed,
            "primary": self.primary,
            "min_effect_ms": self.min_effect_ms,
            "min_effect_share": self.min_effect_share,
        }


@dataclass(frozen=True, slots=True)
class StatComparison:
    """One statistic of one stage: ms for percentiles, a share (0..1) for `over`."""

    name: str
    base: float
    candidate: float
    interval: Interval
    few: bool  # a percentile that either side has too few values to bound

    @property
    def difference(self) -> float:
        return self.candidate - self.base

    @property
    def relative(self) -> float | None:
        """The difference as a share of the base's value; None when that is 0."""
        return self.difference / self.base if self.base else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "candidate": self.candidate,
            "difference": self.difference,
            "relative": self.relative,
            "interval": [self.interval.low, self.interval.high],
            "few": self.few,
        }


@dataclass(frozen=True, slots=True)
class StageComparison:
    name: str
    base_count: int
    candidate_count: int
    stats: dict[str, StatComparison]  # by `STATISTICS` name; empty when unmeasured
    change: Change

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "base_count": self.base_count,
            "candidate_count": self.candidate_count,
            "change": self.change.value,
            **{name: stat.to_dict() for name, stat in self.stats.items()},
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    base: Side
    candidate: Side
    settings: CompareSettings
    interval_confidence: float  # of each interval (the family's, split over the stages)
    stages: Sequence[StageComparison]  # the budget's order, TTFT last

    def stage(self, name: str) -> StageComparison:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def changed(self, change: Change) -> list[str]:
        return [s.name for s in self.stages if s.change is change]

    def to_dict(self) -> dict[str, Any]:
        def side(s: Side) -> dict[str, Any]:
            return {
                "label": s.label,
                "kind": s.kind,
                "source": s.source,
                "requests": len(s.samples),
                "left_out": s.left_out,
            }

        return {
            "base": side(self.base),
            "candidate": side(self.candidate),
            "settings": self.settings.to_dict(),
            "interval_confidence": self.interval_confidence,
            "stages": [s.to_dict() for s in self.stages],
        }


def _stage_names(base: Side, candidate: Side) -> list[str]:
    names = list(base.stage_names)
    names += [n for n in candidate.stage_names if n not in names]
    return [*names, TTFT]


def _change(stat: StatComparison, settings: CompareSettings) -> Change:
    """Slower when the whole interval lies at or above the minimum effect, faster when at
    or below minus it: a change of at least that much, with the stated confidence."""
    if stat.few:
        return Change.FEW
    smallest = max(settings.min_effect_ms, settings.min_effect_share * abs(stat.base))
    if stat.interval.low >= smallest:
        return Change.SLOWER
    if stat.interval.high <= -smallest:
        return Change.FASTER
    return Change.NONE


def compare(base: Side, candidate: Side, settings: CompareSettings | None = None) -> Comparison:
    """Every stage both sides name (and TTFT), compared as the module docstring says."""
    settings = settings or CompareSettings()
    names = _stage_names(base, candidate)
    values = {name: (base.values(name), candidate.values(name)) for name in names}
    tested = sum(1 for a, b in values.values() if a[0] and b[0])
    per_test = 1 - (1 - settings.confidence) / max(tested, 1)
    stages: list[StageComparison] = []
    for stream, name in enumerate(names):
        a, b = values[name]
        if not a[0] or not b[0]:
            stages.append(StageComparison(name, len(a[0]), len(b[0]), {}, Change.UNMEASURED))
            continue
        intervals = bootstrap_differences(
            a,
            b,
            resamples=settings.resamples,
            seed=settings.seed,
            stream=stream,
            confidence=per_test,
        )
        stats = {stat: _stat(stat, a, b, intervals[stat]) for stat in STATISTICS}
        change = _change(stats[settings.primary], settings)
        stages.append(StageComparison(name, len(a[0]), len(b[0]), stats, change))
    return Comparison(base, candidate, settings, per_test, stages)


def _value(stat: str, values: tuple[Sequence[float], Sequence[bool]]) -> float:
    if stat == "over":
        return sum(values[1]) / len(values[1])
    return percentile(sorted(values[0]), PERCENTILE_OF[stat])


def _stat(
    stat: str,
    a: tuple[Sequence[float], Sequence[bool]],
    b: tuple[Sequence[float], Sequence[bool]],
    interval: Interval,
) -> StatComparison:
    q = PERCENTILE_OF.get(stat)
    few = q is not None and not (enough_for(q, len(a[0])) and enough_for(q, len(b[0])))
    return StatComparison(stat, _value(stat, a), _value(stat, b), interval, few)
