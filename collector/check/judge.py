"""`spanbudget check`'s judging: every trace of the files judged, and the exit code."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from ..budget.model import Budget
from ..context import request_attributes
from ..judging.evaluate import Evaluator
from ..judging.verdict import Status, Verdict
from ..spans import Span, group_by_trace

__all__ = ["CheckResult", "FailOn", "evaluate_spans", "exit_code", "fails", "why_empty"]


class FailOn(enum.Enum):
    """The least severe trace status that makes `check` exit 1."""

    OVERRUN = "overrun"
    WARN = "warn"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class CheckResult:
    verdicts: list[Verdict]
    skipped: int  # traces in which no span matched any stage
    started_s: list[float] = field(default_factory=list)  # each verdict's trace start, epoch s


def evaluate_spans(
    spans: Sequence[Span], budget: Budget, *, now: datetime | None = None
) -> CheckResult:
    evaluator = Evaluator(budget)
    evaluated_at = now or datetime.now(UTC)
    verdicts: list[Verdict] = []
    started_s: list[float] = []
    skipped = 0
    for trace in group_by_trace(spans).values():
        verdict = evaluator.evaluate(trace, evaluated_at=evaluated_at)
        if verdict is None:
            skipped += 1
            continue
        extra = request_attributes(trace)  # the prompt's tokens, for `why`
        if extra:
            verdict = replace(verdict, attributes={**verdict.attributes, **extra})
        verdicts.append(verdict)
        started_s.append(min(span.start_ns for span in trace) / 1e9)
    return CheckResult(verdicts, skipped, started_s)


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
