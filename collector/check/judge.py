"""`spanbudget check`'s judging: every trace of the files judged, and the exit code."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Status, Verdict
from spanbudget.collector.spans import Span, group_by_trace

__all__ = ["CheckResult", "FailOn", "evaluate_spans", "exit_code"]


class FailOn(enum.Enum):
    """The least severe trace status that makes `check` exit 1."""

    OVERRUN = "overrun"
    WARN = "warn"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class CheckResult:
    verdicts: list[Verdict]
    skipped: int  # traces in which no span matched any stage


def evaluate_spans(
    spans: Sequence[Span], budget: Budget, *, now: datetime | None = None
) -> CheckResult:
    evaluator = Evaluator(budget)
    evaluated_at = now or datetime.now(UTC)
    verdicts: list[Verdict] = []
    skipped = 0
    for trace in group_by_trace(spans).values():
        verdict = evaluator.evaluate(trace, evaluated_at=evaluated_at)
        if verdict is None:
            skipped += 1
        else:
            verdicts.append(verdict)
    return CheckResult(verdicts, skipped)


def exit_code(verdicts: Iterable[Verdict], fail_on: FailOn) -> int:
    """0 when nothing is at or above `fail_on`, else 1.

    A failed request (`error`) and a trace without a first token (`incomplete`) rank
    above `overrun`: neither met the budget.
    """
    if fail_on is FailOn.NEVER:
        return 0
    threshold = Status.OVERRUN if fail_on is FailOn.OVERRUN else Status.WARN
    worst = max((v.status.severity for v in verdicts), default=0)
    return 1 if worst >= threshold.severity else 0
