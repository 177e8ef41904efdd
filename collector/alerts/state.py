"""Inactive, pending, firing: the state of one burn-rate rule on one stage. Pure.

As Prometheus does for an alerting rule with `for` and `keep_firing_for`: a rule that
starts burning is pending; it fires once it has burned for `for_s` without a break (a
break sends it back to inactive, and the wait starts over); a firing rule that stops
burning keeps firing until it has stayed under for `keep_firing_s`, and burning again
within that hold carries on the same firing. So a burst shorter than `for_s` never fires,
and a burn that dips under for less than the hold never resolves and fires again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .burnrate import BurnRule, WindowBurn, human_duration

__all__ = ["RuleState", "RuleStatus", "RuleTrack"]

_NO_TRAFFIC = WindowBurn(0.0, 0, 0)


class RuleState(enum.Enum):
    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"


@dataclass(slots=True)
class RuleTrack:
    """The state machine of one rule on one stage, stepped at every evaluation."""

    rule: BurnRule
    state: RuleState = RuleState.INACTIVE
    since: float | None = None  # pending: burning since; firing: fired at
    under_since: float | None = None  # firing but no longer burning: since when
    burning: bool = False
    long: WindowBurn = _NO_TRAFFIC  # as of the last evaluation
    short: WindowBurn = _NO_TRAFFIC

    def step(self, now: float, long: WindowBurn, short: WindowBurn, burning: bool) -> RuleState:
        """Move on to `now`, given whether the rule burns there; return the new state."""
        self.long, self.short, self.burning = long, short, burning
        if self.state is RuleState.INACTIVE and burning:
            self.state, self.since = RuleState.PENDING, now
        if self.state is RuleState.PENDING:
            if not burning:
                self.state, self.since = RuleState.INACTIVE, None
            elif self.since is not None and now - self.since >= self.rule.for_s:
                self.state, self.since, self.under_since = RuleState.FIRING, now, None
            return self.state
        if self.state is RuleState.FIRING:
            if burning:
                self.under_since = None
            else:
                if self.under_since is None:
                    self.under_since = now
                if now - self.under_since >= self.rule.keep_firing_s:
                    self.state, self.since, self.under_since = RuleState.INACTIVE, None, None
        return self.state

    @property
    def fires_at(self) -> float | None:
        """When a pending rule fires if it keeps burning."""
        if self.state is not RuleState.PENDING or self.since is None:
            return None
        return self.since + self.rule.for_s

    @property
    def resolves_at(self) -> float | None:
        """When a firing rule that no longer burns resolves if it stays under."""
        if self.state is not RuleState.FIRING or self.under_since is None:
            return None
        return self.under_since + self.rule.keep_firing_s


@dataclass(frozen=True, slots=True)
class RuleStatus:
    """One rule on one stage as `GET /api/alerts` shows it."""

    budget: str
    stage: str
    track: RuleTrack  # a copy, taken under the engine's lock
    trace_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        track, rule = self.track, self.track.rule
        return {
            "budget": self.budget,
            "stage": self.stage,
            "severity": rule.severity,
            "rule": rule.describe(),
            "burn_rate_threshold": rule.factor,
            "for": human_duration(rule.for_s),
            "keep_firing_for": human_duration(rule.keep_firing_s),
            "state": track.state.value,
            "burning": track.burning,
            "since": _rfc3339(track.since),
            "fires_at": _rfc3339(track.fires_at),
            "resolves_at": _rfc3339(track.resolves_at),
            "windows": {
                "long": _window(rule.long_s, track.long),
                "short": _window(rule.short_s, track.short),
            },
            "trace_ids": list(self.trace_ids),
        }


def _window(length_s: float, burn: WindowBurn) -> dict[str, Any]:
    return {
        "window": human_duration(length_s),
        "burn_rate": round(burn.burn, 3),
        "judged": burn.judged,
        "over_limit": burn.over,
    }


def _rfc3339(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
