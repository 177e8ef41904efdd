"""`spanbudget check`'s judging: every trace of the files judged, and the exit code."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..budget.loader import load_preset
from ..budget.model import Budget, FirstTokenMark
from ..budget.presets import preset_names
from ..judging.auto import Judges
from ..judging.verdict import Status, Verdict
from ..spans import Span, group_by_trace, seconds_value

__all__ = [
    "CheckResult",
    "FailOn",
    "NoMark",
    "SkewWithoutHosts",
    "evaluate_spans",
    "exit_code",
    "fails",
    "why_empty",
]


class FailOn(enum.Enum):
    """The least severe trace status that makes `check` exit 1."""

    OVERRUN = "overrun"
    WARN = "warn"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class NoMark:
    """Traces judged by one budget that have no first token: none of their spans carries
    a mark it reads. `other`: a preset whose marks they do carry."""

    budget: str
    traces: int
    marks: tuple[str, ...]
    other: str | None = None

    def line(self) -> str:
        text = (
            f"{self.traces} trace(s) have no first token: none of their spans carries a mark"
            f" budget {self.budget} reads ({'; '.join(self.marks)})"
        )
        if self.other is not None:
            return text + f"; they carry {self.other}'s: judge them with --preset {self.other}"
        return (
            text + "; their instrumentation records none here (docs/usage.md: which library"
            " records what, and the server's first body send)"
        )


@dataclass(frozen=True, slots=True)
class SkewWithoutHosts:
    """Traces whose spans were shifted for clock skew (DESIGN §5 rule 3a) where some span
    names no host, so that service names stood in for hosts: services on one machine, or
    with synchronised clocks, are shifted by how they ended, not by a clock's error."""

    traces: int
    largest_ms: float

    def line(self) -> str:
        return (
            f"{self.traces} trace(s) had spans shifted for clock skew (up to"
            f" {self.largest_ms:.2f} ms) between services that name no host: spans of one"
            " host.name are never shifted (set it with OTEL_RESOURCE_ATTRIBUTES=host.name=..."
            " or the SDK's host resource detector where the services share a clock)"
        )


@dataclass(frozen=True, slots=True)
class CheckResult:
    verdicts: list[Verdict]
    skipped: int  # traces in which no span matched any stage
    started_s: list[float] = field(default_factory=list)  # each verdict's trace start, epoch s
    budgets: dict[str, Budget] = field(default_factory=dict)  # by name: each that judged
    no_mark: list[NoMark] = field(default_factory=list)  # why traces have no first token
    skew_without_hosts: SkewWithoutHosts | None = None


def evaluate_spans(
    spans: Sequence[Span],
    budget: Budget,
    *,
    now: datetime | None = None,
    recognise: bool = True,
) -> CheckResult:
    """Every trace of `spans` judged: by the preset of the instrumentation it is traced
    with (`judging.auto.Judges`), else by `budget`; `recognise=False` judges all with it."""
    judges = Judges(budget, recognise=recognise)
    evaluated_at = now or datetime.now(UTC)
    verdicts: list[Verdict] = []
    started_s: list[float] = []
    skipped = 0
    unmarked: dict[str, list[list[Span]]] = {}
    shifted: list[float] = []  # skew of the traces where service names stood in for hosts
    for trace in group_by_trace(spans).values():
        verdict = judges.evaluate(trace, evaluated_at=evaluated_at)
        if verdict is None:
            skipped += 1
            continue
        verdicts.append(verdict)
        started_s.append(min(span.start_ns for span in trace) / 1e9)
        if verdict.status is Status.INCOMPLETE and not verdict.damaged:
            unmarked.setdefault(verdict.budget, []).append(trace)
        if verdict.skew_adjusted_ms > 0 and any(span.host is None for span in trace):
            shifted.append(verdict.skew_adjusted_ms)
    budgets = {b.name: b for b in judges.budgets()}
    hints = [_no_mark(budgets[name], traces) for name, traces in unmarked.items()]
    skew = SkewWithoutHosts(len(shifted), max(shifted)) if shifted else None
    return CheckResult(verdicts, skipped, started_s, budgets, hints, skew)


def _no_mark(budget: Budget, traces: list[list[Span]]) -> NoMark:
    """Why these traces, judged by `budget`, have no first token, and which preset's
    marks they carry instead, if any."""
    marks = tuple(mark.describe() for mark in budget.first_token)
    for name in preset_names():
        preset = load_preset(name).budget
        if name == budget.preset or preset.name == budget.name:
            continue
        if any(_carries_a_mark(trace, preset.first_token) for trace in traces):
            return NoMark(budget.name, len(traces), marks, name)
    return NoMark(budget.name, len(traces), marks)


def _carries_a_mark(spans: Sequence[Span], marks: Sequence[FirstTokenMark]) -> bool:
    """Whether a span carries the attribute or the event of one of `marks`, or is the
    child one of them reads the start of."""
    for span in spans:
        names = {event.name for event in span.events}
        for mark in marks:
            value = None if mark.attribute is None else span.attributes.get(mark.attribute)
            if seconds_value(value) is not None:
                return True
            if names & mark.events:
                return True
            child = mark.first_child
            if child is not None and (
                child.matches_shape(span.name, span.kind, span.service, False)
                and child.matches_attributes(span.attributes)
            ):
                return True
    return False


def why_empty(result: CheckResult, budget: Budget) -> str | None:
    """Why no trace was judged, None when one was: a check that judged nothing passed
    nothing (a typo in a selector must not be a green build)."""
    if result.verdicts:
        return None
    if result.skipped == 0:
        return "no trace judged: the input holds no spans"
    return (
        f"no trace judged: in {result.skipped} trace(s) read no span matched any stage of "
        f"budget {budget.name!r}; check its selectors, or judge with a --preset that fits "
        "the instrumentation (--allow-empty passes anyway)"
    )


def fails(verdict: Verdict, fail_on: FailOn) -> bool:
    """Whether this trace is at or above `fail_on`. A failed request (`error`) and a trace
    without a first token (`incomplete`) rank above `overrun`: neither met the budget."""
    if fail_on is FailOn.NEVER:
        return False
    threshold = Status.OVERRUN if fail_on is FailOn.OVERRUN else Status.WARN
    return verdict.status.severity >= threshold.severity


def exit_code(
    result: CheckResult,
    budget: Budget,
    fail_on: FailOn,
    *,
    unreadable: int = 0,
    allow_empty: bool = False,
) -> int:
    """2 when an input could not be read or, unless `allow_empty`, nothing was judged;
    else 1 when a trace `fails` at `fail_on`, and 0 when none does."""
    if unreadable or (not allow_empty and why_empty(result, budget) is not None):
        return 2
    return 1 if any(fails(v, fail_on) for v in result.verdicts) else 0
