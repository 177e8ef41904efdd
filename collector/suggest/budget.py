"""`spanbudget budget suggest`: a budget proposed from observed traces.

Stages come from a preset, from a budget file, or from the span tree's structure
(`suggest_stages`). Each trace is judged with them by the evaluator, so every stage's
number is its exclusive critical-path time exactly as `check` and the collector will
measure it. A stage's target is its median, its limit the percentile of the SLO objective,
both rounded up; the total's are the same percentiles of the time to first token, raised
to the stages' sums where those are larger, so that a trace within every stage's limit is
within the total. Pure: spans in, text out; the CLI does the reading and printing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from spanbudget.collector.budget.loader import parse_budget
from spanbudget.collector.budget.model import DEFAULT_FIRST_TOKEN, Budget, Stage, WhenAbsent
from spanbudget.collector.budget.render import number, render_mark, render_selector, scalar
from spanbudget.collector.errors import CollectorError
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Status, Verdict
from spanbudget.collector.spans import Span, group_by_trace
from spanbudget.collector.stats import percentile
from spanbudget.collector.suggest.stages import stages_from_structure

__all__ = [
    "NoTracesError",
    "Observed",
    "StageSuggestion",
    "Suggestion",
    "ceil_ms",
    "render",
    "suggest",
]

MIN_MS = 0.1  # the smallest number suggested: a stage never above 0 ms still needs a limit
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class NoTracesError(CollectorError, ValueError):
    """No trace had a first token and a matching stage: there is nothing to learn from."""


def ceil_ms(value: float) -> float:
    """Round up to two significant digits, to whole milliseconds from 10 ms: 41.3 -> 42,
    117.6 -> 118, 3.96 -> 4, 0.731 -> 0.74. Never more than 10 % above, never below."""
    if value <= MIN_MS:
        return MIN_MS
    step = min(1.0, max(0.01, 10.0 ** (math.floor(math.log10(value)) - 1)))
    return round(math.ceil(round(value / step, 6)) * step, 2)


@dataclass(frozen=True, slots=True)
class Observed:
    count: int
    median_ms: float
    high_ms: float  # the objective's percentile


@dataclass(frozen=True, slots=True)
class StageSuggestion:
    stage: Stage  # with the suggested numbers
    observed: Observed | None  # None: no trace measured it, the numbers are the base's


@dataclass(frozen=True, slots=True)
class Suggestion:
    objective: float
    origin: str  # "preset NAME", "budget FILE" or "the span tree's structure"
    base: Budget  # where the stages, names and marks came from
    traces: int  # judged traces the numbers come from
    left_out: dict[str, int]  # status -> traces left out (error, incomplete)
    skipped: int  # traces no stage matched
    total: Observed
    total_target_ms: float
    total_limit_ms: float
    stages: tuple[StageSuggestion, ...]
    dropped: tuple[str, ...]  # structure stages that never took any time

    @property
    def percentile_name(self) -> str:
        return f"p{self.objective * 100:g}"

    def budget(self) -> Budget:
        return replace(
            self.base,
            total_target_ms=self.total_target_ms,
            total_limit_ms=self.total_limit_ms,
            stages=tuple(s.stage for s in self.stages),
            slo_objective=self.objective,
        )


def _observe(values: list[float], objective: float) -> Observed | None:
    if not values:
        return None
    ordered = sorted(values)
    return Observed(len(ordered), percentile(ordered, 50), percentile(ordered, objective * 100))


def _judge(budget: Budget, traces: list[list[Span]]) -> tuple[list[Verdict], dict[str, int], int]:
    evaluator = Evaluator(budget)
    kept: list[Verdict] = []
    left_out: dict[str, int] = {}
    skipped = 0
    for trace in traces:
        verdict = evaluator.evaluate(trace, evaluated_at=_EPOCH)
        if verdict is None:
            skipped += 1
        elif verdict.status in (Status.ERROR, Status.INCOMPLETE) or verdict.ttft_ms is None:
            left_out[verdict.status.value] = left_out.get(verdict.status.value, 0) + 1
        else:
            kept.append(verdict)
    return kept, left_out, skipped


def _stage_values(verdicts: list[Verdict], name: str) -> list[float]:
    values: list[float] = []
    for verdict in verdicts:
        result = verdict.stage(name)
        if result.ms is not None and result.status is not Status.ABSENT:
            values.append(result.ms)
    return values


def _structure_budget(traces: list[list[Span]]) -> Budget:
    drafts = stages_from_structure(traces, DEFAULT_FIRST_TOKEN)
    if not drafts:
        raise NoTracesError("no trace has a first token to end the time to first token")
    stages = tuple(Stage(d.name, 1.0, 1.0, d.selectors, d.when_absent) for d in drafts)
    return Budget(
        name="suggested-ttft",
        total_target_ms=1.0,
        total_limit_ms=1.0,
        stages=stages,
        description="Proposed by spanbudget budget suggest from observed traces.",
    )


def suggest(
    spans: Sequence[Span], *, objective: float, base: Budget | None = None, origin: str = ""
) -> Suggestion:
    """Numbers for `base`'s stages (or for stages from the structure when None)."""
    if not 0 < objective < 1:
        raise ValueError(f"the objective must be between 0 and 1, got {objective}")
    traces = list(group_by_trace(spans).values())
    structural = base is None
    budget = _structure_budget(traces) if base is None else base
    verdicts, left_out, skipped = _judge(budget, traces)
    dropped: list[str] = []
    if structural:
        # A stage that never took time would only be noise: its spans go to their parent's.
        idle = [
            s.name for s in budget.stages if max(_stage_values(verdicts, s.name), default=0) == 0
        ]
        if idle and len(idle) < len(budget.stages):
            budget = replace(budget, stages=tuple(s for s in budget.stages if s.name not in idle))
            dropped = idle
            verdicts, left_out, skipped = _judge(budget, traces)
    total = _observe([v.ttft_ms for v in verdicts if v.ttft_ms is not None], objective)
    if total is None:
        raise NoTracesError(
            "no trace with a first token matched a stage"
            + (f" ({sum(left_out.values())} failed or incomplete)" if left_out else "")
        )
    suggestions: list[StageSuggestion] = []
    for stage in budget.stages:
        observed = _observe(_stage_values(verdicts, stage.name), objective)
        if observed is None:
            suggestions.append(StageSuggestion(stage, None))
            continue
        numbers = replace(
            stage, target_ms=ceil_ms(observed.median_ms), limit_ms=ceil_ms(observed.high_ms)
        )
        suggestions.append(StageSuggestion(numbers, observed))
    total_target = ceil_ms(max(total.median_ms, _sum(s.stage.target_ms for s in suggestions)))
    total_limit = ceil_ms(max(total.high_ms, _sum(s.stage.limit_ms for s in suggestions)))
    return Suggestion(
        objective=objective,
        origin=origin or "the span tree's structure",
        base=budget,
        traces=total.count,
        left_out=left_out,
        skipped=skipped,
        total=total,
        total_target_ms=total_target,
        total_limit_ms=total_limit,
        stages=tuple(suggestions),
        dropped=tuple(dropped),
    )


def _sum(values: Iterable[float]) -> float:
    return round(sum(values), 2)


def _comment(what: str, observed: Observed, value: float) -> str:
    return f"{what} of {observed.count} traces was {number(value)} ms"


def render(suggestion: Suggestion, *, extends: str | None = None) -> str:
    """The suggestion as budget.yaml text, a comment on every number saying where it came
    from. With `extends` (a preset's name) only the numbers are written, over that preset.

    The text is checked with the strict loader before it is returned.
    """
    s = suggestion
    high = s.percentile_name
    left = ", ".join(f"{n} {status}" for status, n in sorted(s.left_out.items()))
    lines = [
        f"# Suggested by `spanbudget budget suggest` from {s.traces} traces"
        + (f" ({left} left out)" if left else "")
        + (f"; {s.skipped} matched no stage" if s.skipped else "")
        + ".",
        f"# Stages from {s.origin}. Targets are medians, limits {high}s (the SLO objective),",
        "# of each stage's exclusive time on the critical path, rounded up.",
    ]
    if s.dropped:
        lines.append(f"# Left out, never above 0 ms: {', '.join(s.dropped)}.")
    lines.append("version: 1")
    if extends is not None:
        lines.append(f"preset: {scalar(extends)}")
    else:
        lines.append(f"name: {scalar(s.base.name)}")
        if s.base.description:
            lines.append(f"description: {json.dumps(s.base.description)}")
    target_sum = _sum(x.stage.target_ms for x in s.stages)
    limit_sum = _sum(x.stage.limit_ms for x in s.stages)
    lines.append("total:")
    lines.append(
        f"  target_ms: {number(s.total_target_ms)}  # "
        + _total_reason("median", s.total, s.total.median_ms, target_sum)
    )
    lines.append(
        f"  limit_ms: {number(s.total_limit_ms)}  # "
        + _total_reason(high, s.total, s.total.high_ms, limit_sum)
    )
    lines.append("slo:")
    lines.append(f"  objective: {s.objective:g}  # limits are the {high} of what was observed")
    if extends is None and s.base.first_token != DEFAULT_FIRST_TOKEN:
        lines.append("first_token:")
        lines.extend(f"  - {render_mark(mark)}" for mark in s.base.first_token)
    lines.append("stages:")
    for item in s.stages:
        lines.extend(_stage_lines(item, high, full=extends is None))
    text = "\n".join(lines) + "\n"
    parse_budget(text, "the suggested budget")  # raises BudgetError if it would not load
    return text


def _total_reason(what: str, observed: Observed, value: float, parts: float) -> str:
    name = "p50" if what == "median" else what
    if parts > value:
        return (
            f"the stages add up to {number(parts)} ms, above the {name} of TTFT "
            f"({number(value)} ms): within every stage is within the total"
        )
    return f"{name} of TTFT over {observed.count} traces was {number(value)} ms"


def _stage_lines(item: StageSuggestion, high: str, *, full: bool) -> list[str]:
    stage, observed = item.stage, item.observed
    if observed is None and not full:
        return [
            f"  # {stage.name}: no trace had a span for it; the preset's "
            f"{number(stage.target_ms)} / {number(stage.limit_ms)} ms stay"
        ]
    lines = [f"  - name: {scalar(stage.name)}"]
    if observed is None:
        lines.append(f"    target_ms: {number(stage.target_ms)}  # no trace measured it: as given")
        lines.append(f"    limit_ms: {number(stage.limit_ms)}  # no trace measured it: as given")
    else:
        lines.append(
            f"    target_ms: {number(stage.target_ms)}  # "
            + _comment("p50", observed, observed.median_ms)
        )
        lines.append(
            f"    limit_ms: {number(stage.limit_ms)}  # "
            + _comment(high, observed, observed.high_ms)
        )
    if full:
        if stage.when_absent is not WhenAbsent.ZERO:
            lines.append(f"    when_absent: {stage.when_absent.value}")
        selectors = ", ".join(render_selector(sel) for sel in stage.selectors)
        lines.append(f"    match: [{selectors}]")
    return lines
