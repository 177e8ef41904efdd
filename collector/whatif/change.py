"""A stage change as `whatif --stage` states it: `NAME=x0.8`, `NAME=-20ms`, `NAME=+5ms`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["StageChange", "parse_change", "parse_changes"]

_SPEC = re.compile(
    r"\s*(?P<name>[^=\s]+)\s*=\s*(?:[x×](?P<factor>\d+(?:\.\d*)?|\.\d+)|"
    r"(?P<shift>[+-]\s*(?:\d+(?:\.\d*)?|\.\d+))\s*ms)\s*\Z"
)


@dataclass(frozen=True, slots=True)
class StageChange:
    """Scale a stage's time by `factor`, or shift it by `shift_ms` (exactly one is set)."""

    stage: str
    factor: float | None = None
    shift_ms: float | None = None

    def describe(self) -> str:
        if self.factor is not None:
            return f"{self.stage} x{self.factor:g}"
        assert self.shift_ms is not None
        return f"{self.stage} {self.shift_ms:+g} ms"

    def factor_for(self, stage_ms: float) -> float | None:
        """The scale that makes this change in a trace where the stage took `stage_ms` on
        the critical path: a shift of d is the scale (ms + d) / ms, at least 0; None when
        the stage had no time there (a shift cannot say where to add or take it)."""
        if self.factor is not None:
            return self.factor
        assert self.shift_ms is not None
        if stage_ms <= 0:
            return None
        return max(0.0, stage_ms + self.shift_ms) / stage_ms


def parse_change(text: str) -> StageChange:
    """One `--stage` value; ValueError with what to write instead."""
    match = _SPEC.match(text)
    if match is None:
        raise ValueError(
            f"--stage {text!r}: write NAME=x0.8 (scale), NAME=-20ms or NAME=+5ms (shift)"
        )
    name = match["name"]
    if match["factor"] is not None:
        return StageChange(name, factor=float(match["factor"]))
    return StageChange(name, shift_ms=float(match["shift"].replace(" ", "")))


def parse_changes(texts: Iterable[str], stage_names: Iterable[str]) -> Mapping[str, StageChange]:
    """Every `--stage`, by stage; ValueError for an unknown stage or one given twice."""
    known = list(stage_names)
    changes: dict[str, StageChange] = {}
    for text in texts:
        change = parse_change(text)
        if change.stage not in known:
            raise ValueError(
                f"--stage {text!r}: no stage {change.stage!r} in the budget ({', '.join(known)})"
            )
        if change.stage in changes:
            raise ValueError(f"--stage: {change.stage} is changed twice")
        changes[change.stage] = change
    return changes
