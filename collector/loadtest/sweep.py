"""The knee of the curve, per stage (pure: step figures in, knees out).

A sweep is a load test at each of several rates, one normal run a step. For every stage
(and for the time to first token, and the share within every limit) each step is decided
as `decide_slo` decides a share: within when the whole 95 % interval of its p95 is at or
below the limit, over when the whole interval is above it, not decided when the interval
straddles it, and `few` when the step has fewer values than a p95 needs (`min_count`).
A stage breaks at the lowest rate decided over; its knee is the highest rate below that
decided within. Noise above a break does not move a knee back up.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..stats import (
    CONFIDENCE,
    SloDecision,
    decide_slo,
    enough_for,
    min_count,
    percentile,
    quantile_interval,
    wilson_interval,
)
from .records import RequestResult
from .report_model import Report

__all__ = [
    "BOUNDED_P95",
    "MAX_STEPS",
    "P95",
    "SLO_ROW",
    "TTFT_ROW",
    "Decision",
    "Knee",
    "Sweep",
    "SweepStep",
    "find_knee",
    "parse_sweep",
    "rate_label",
]

MAX_STEPS = 50
# The fewest values whose p95 interval has an upper end (72): below it a step can be
# decided over its limit but never within. A step's default length holds at least these.
BOUNDED_P95 = min_count(95, 1 - (1 - CONFIDENCE) / 2)
TTFT_ROW = "TTFT"
SLO_ROW = "within every limit"


class Decision(enum.Enum):
    WITHIN = "within"
    OVER = "over"
    NOT_DECIDED = "not decided"
    FEW = "few"  # fewer values than a p95 needs


def parse_sweep(text: str) -> list[float]:
    """`FROM:TO:STEP` in requests per second: FROM, FROM + STEP, ... up to TO (included
    when it falls on the grid). Raises ValueError with what to change."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"--sweep {text!r}: give FROM:TO:STEP in req/s, e.g. 2:14:3")
    try:
        start, stop, step = (float(part) for part in parts)
    except ValueError:
        raise ValueError(f"--sweep {text!r}: FROM, TO and STEP must be numbers") from None
    if not all(math.isfinite(x) for x in (start, stop, step)):
        raise ValueError(f"--sweep {text!r}: FROM, TO and STEP must be finite")
    if start <= 0 or step <= 0:
        raise ValueError(f"--sweep {text!r}: FROM and STEP must be above 0")
    if stop < start:
        raise ValueError(f"--sweep {text!r}: TO must be at least FROM")
    count = math.floor((stop - start) / step + 1e-9) + 1
    if count > MAX_STEPS:
        raise ValueError(f"--sweep {text!r}: {count} steps; at most {MAX_STEPS}, raise STEP")
    return [round(start + i * step, 6) for i in range(count)]


def rate_label(rate: float) -> str:
    """`8`, `2.5`: a rate as run ids and folder names carry it (`RUNID-r8`)."""
    return f"{rate:g}"


@dataclass(frozen=True, slots=True)
class P95:
    """One step's p95 of one stage, with its distribution-free 95 % interval. `high_ms` is
    None when not even the largest value bounds the p95 from above (fewer than 72)."""

    count: int
    p95_ms: float | None
    low_ms: float | None
    high_ms: float | None

    @classmethod
    def of(cls, values: Iterable[float]) -> P95:
        ordered = sorted(values)
        if not ordered:
            return cls(0, None, None, None)
        low, high = quantile_interval(ordered, 95)
        return cls(len(ordered), percentile(ordered, 95), low, high)

    def judge(self, limit_ms: float) -> Decision:
        if not enough_for(95, self.count) or self.low_ms is None:
            return Decision.FEW
        if self.high_ms is not None and self.high_ms <= limit_ms:
            return Decision.WITHIN
        if self.low_ms > limit_ms:
            return Decision.OVER
        return Decision.NOT_DECIDED

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "p95_ms": self.p95_ms, "low_ms": self.low_ms,
                "high_ms": self.high_ms}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> P95:
        return cls(int(data["count"]), data["p95_ms"], data["low_ms"], data["high_ms"])


_SLO = {
    SloDecision.MET: Decision.WITHIN,
    SloDecision.BREACHED: Decision.OVER,
    SloDecision.NOT_DECIDED: Decision.NOT_DECIDED,
}


@dataclass(frozen=True, slots=True)
class SweepStep:
    """What one step (one normal run at one rate) measured."""

    rate: float  # asked for, req/s
    run_id: str
    requests: int
    errors: int
    joined: int  # requests with a verdict
    within: int  # requests within every limit
    duration_s: float  # from the first send to the last response
    stages: Mapping[str, P95]  # by name, in the budget's order
    ttft: P95
    slo_met: bool  # as `loadtest` decides its exit code

    @classmethod
    def of(cls, rate: float, report: Report, results: Sequence[RequestResult]) -> SweepStep:
        """From a finished run's report and its records (`requests.csv`)."""
        timed = [r.verdict for r in results if r.verdict is not None and r.verdict.timed]
        stages = {
            line.name: P95.of(
                ms for v in timed if (t := v.stages.get(line.name)) and (ms := t.ms) is not None
            )
            for line in report.stages
        }
        return cls(
            rate=rate,
            run_id=report.info.run_id,
            requests=report.requests,
            errors=report.errors,
            joined=report.joined,
            within=round(report.within_limits * report.requests),
            duration_s=report.info.duration_s,
            stages=stages,
            ttft=P95.of(v.ttft_ms for v in timed if v.ttft_ms is not None),
            slo_met=report.slo_met,
        )

    @property
    def sent_rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def share(self) -> float | None:
        return self.within / self.requests if self.requests else None

    def slo_decision(self, objective: float) -> Decision:
        return _SLO[decide_slo(self.within, self.requests, objective)]

    def to_dict(self, objective: float) -> dict[str, Any]:
        low, high = wilson_interval(self.within, self.requests)
        return {
            "rate": self.rate,
            "run_id": self.run_id,
            "folder": f"r{rate_label(self.rate)}",
            "requests": self.requests,
            "errors": self.errors,
            "joined": self.joined,
            "duration_s": self.duration_s,
            "sent_rps": self.sent_rps,
            "enough_for_p95": enough_for(95, self.requests),
            "within_limits": {"within": self.within, "share": self.share, "low": low,
                              "high": high,
                              "decision": decide_slo(self.within, self.requests, objective).value},
            "slo_met": self.slo_met,
            "ttft": self.ttft.to_dict(),
            "stages": {name: p95.to_dict() for name, p95 in self.stages.items()},
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepStep:
        return cls(
            rate=float(data["rate"]),
            run_id=str(data["run_id"]),
            requests=int(data["requests"]),
            errors=int(data["errors"]),
            joined=int(data["joined"]),
            within=int(data["within_limits"]["within"]),
            duration_s=float(data["duration_s"]),
            stages={k: P95.from_dict(v) for k, v in data["stages"].items()},
            ttft=P95.from_dict(data["ttft"]),
            slo_met=bool(data["slo_met"]),
        )


@dataclass(frozen=True, slots=True)
class Knee:
    """Where one stage (or TTFT, or the share within every limit) stops holding.

    `breaks_at`: the lowest rate decided over. `holds_to`: the highest rate below that
    which was decided within (None: none was). `undecided_at`: the lowest step between the
    two that was neither (not decided, or too few values): the knee may lie there.
    `undecided`: every such step below the break, for the record.
    """

    name: str
    limit: float  # ms, or the objective for the share within every limit
    holds_to: float | None
    undecided_at: float | None
    breaks_at: float | None
    swept_to: float
    undecided: tuple[float, ...] = ()

    @property
    def held_throughout(self) -> bool:
        return (
            self.breaks_at is None
            and self.holds_to is not None
            and (self.holds_to >= self.swept_to)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "limit": self.limit,
            "holds_to": self.holds_to,
            "held_throughout": self.held_throughout,
            "undecided_at": self.undecided_at,
            "breaks_at": self.breaks_at,
            "undecided": list(self.undecided),
        }


def find_knee(name: str, limit: float, decisions: Sequence[tuple[float, Decision]]) -> Knee:
    """The knee from each step's (rate, decision), in any order."""
    ordered = sorted(decisions)
    breaks_at = next((rate for rate, d in ordered if d is Decision.OVER), None)
    below = [(r, d) for r, d in ordered if breaks_at is None or r < breaks_at]
    holds_to = max((r for r, d in below if d is Decision.WITHIN), default=None)
    undecided = tuple(r for r, d in below if d in (Decision.NOT_DECIDED, Decision.FEW))
    undecided_at = next((r for r in undecided if holds_to is None or r > holds_to), None)
    swept_to = ordered[-1][0] if ordered else 0.0
    return Knee(name, limit, holds_to, undecided_at, breaks_at, swept_to, undecided)


@dataclass(frozen=True)
class Sweep:
    """A whole sweep: the budget's limits, each step, and what failed (if a step did)."""

    run_id: str
    budget_name: str
    objective: float
    total_limit_ms: float
    limits_ms: Mapping[str, float]  # each stage's limit, in the budget's order
    targets_ms: Mapping[str, float]
    rates: Sequence[float]  # asked for, including steps not reached
    steps: Sequence[SweepStep] = field(default_factory=tuple)
    failed: str = ""  # why the sweep stopped early, when it did
    ui_url: str = ""

    def decision(self, step: SweepStep, row: str) -> Decision:
        """A step's decision for a stage's row, the TTFT row or the SLO row."""
        if row == SLO_ROW:
            return step.slo_decision(self.objective)
        if row == TTFT_ROW:
            return step.ttft.judge(self.total_limit_ms)
        return step.stages[row].judge(self.limits_ms[row])

    def figure(self, step: SweepStep, row: str) -> P95 | None:
        """A step's p95 for a stage's row or the TTFT row (None for the SLO row)."""
        if row == SLO_ROW:
            return None
        return step.ttft if row == TTFT_ROW else step.stages.get(row)

    def limit(self, row: str) -> float:
        if row == SLO_ROW:
            return self.objective
        return self.total_limit_ms if row == TTFT_ROW else self.limits_ms[row]

    @property
    def rows(self) -> list[str]:
        return [*self.limits_ms, TTFT_ROW, SLO_ROW]

    def knees(self) -> list[Knee]:
        """Per stage in the budget's order, then TTFT, then the share within every limit."""
        return [
            find_knee(row, self.limit(row), [(s.rate, self.decision(s, row)) for s in self.steps])
            for row in self.rows
        ]

    def first_break(self) -> tuple[str, float] | None:
        """The stage decided over at the lowest rate, and that rate; between stages that
        break at one rate, the one whose p95 is furthest over its limit (as a share)."""
        broken = [k for k in self.knees()[: len(self.limits_ms)] if k.breaks_at is not None]
        if not broken:
            return None

        def excess(knee: Knee) -> float:
            step = next(s for s in self.steps if s.rate == knee.breaks_at)
            p95 = step.stages[knee.name].p95_ms or 0.0
            return p95 / knee.limit if knee.limit else math.inf

        first = min(broken, key=lambda k: (k.breaks_at, -excess(k)))
        assert first.breaks_at is not None
        return first.name, first.breaks_at

    @property
    def slo_met(self) -> bool:
        """Every step held the objective, as `loadtest` decides it for one run."""
        return bool(self.steps) and all(s.slo_met for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        first = self.first_break()
        return {
            "run_id": self.run_id,
            "budget": {
                "name": self.budget_name,
                "slo_objective": self.objective,
                "total_limit_ms": self.total_limit_ms,
                "stages": {
                    n: {"target_ms": self.targets_ms[n], "limit_ms": lim}
                    for n, lim in self.limits_ms.items()
                },
            },
            "confidence": CONFIDENCE,
            "min_requests_for_p95": min_count(95),
            "rates": list(self.rates),
            "failed": self.failed,
            "ui_url": self.ui_url,
            "slo_met": self.slo_met,
            "knees": [k.to_dict() for k in self.knees()],
            "first_break": None if first is None else {"stage": first[0], "rate": first[1]},
            "steps": [s.to_dict(self.objective) for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sweep:
        stages = data["budget"]["stages"]
        return cls(
            run_id=str(data["run_id"]),
            budget_name=str(data["budget"]["name"]),
            objective=float(data["budget"]["slo_objective"]),
            total_limit_ms=float(data["budget"]["total_limit_ms"]),
            limits_ms={n: float(s["limit_ms"]) for n, s in stages.items()},
            targets_ms={n: float(s["target_ms"]) for n, s in stages.items()},
            rates=[float(r) for r in data["rates"]],
            steps=[SweepStep.from_dict(s) for s in data["steps"]],
            failed=str(data.get("failed", "")),
            ui_url=str(data.get("ui_url", "")),
        )
