"""`spanbudget budget suggest`: a budget proposed from observed traces.

Stages come from a preset, from a budget file, or from the span tree's structure
(`suggest_stages`). Each trace is judged with them by the evaluator, so every stage's
number is its exclusive critical-path time exactly as `check` and the collector will
measure it. A stage's target is its median, rounded up; its limit one common percentile
of every stage plus headroom, at least a floor, rounded up, at the lowest percentile at
which the objective holds jointly on the same traces (`joint`). The total's are the same
percentiles of the time to first token, raised to the stages' sums where those are larger,
so that a trace within every stage's limit is within the total. Every number's interval
is reported beside it. Pure: spans in, text out; the CLI does the reading and printing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from ..budget.loader import parse_budget
from ..budget.model import DEFAULT_FIRST_TOKEN, Budget, Stage, WhenAbsent
from ..budget.recognize import recognize
from ..budget.render import number, render_mark, render_selector, scalar
from ..errors import CollectorError
from ..judging.evaluate import Evaluator
from ..judging.verdict import Status, Verdict
from ..spans import Span, group_by_trace
from ..stats import CONFIDENCE, percentile, quantile_interval
from .joint import FLOOR_MS, HEADROOM, Limits, find_level, limits_at
from .stages import stages_from_structure

__all__ = [
    "MIN_TRACES",
    "NoTracesError",
    "Observed",
    "Recognised",
    "StageSuggestion",
    "Suggestion",
    "TooFewTracesError",
    "ceil_ms",
    "recognised",
    "render",
    "suggest",
]

MIN_MS = 0.1  # the smallest number suggested: a stage never above 0 ms still needs a target
MIN_TRACES = 100  # fewer cannot bound the high percentiles limits come from
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class NoTracesError(CollectorError, ValueError):
    """No trace had a first token and a matching stage: there is nothing to learn from."""


class TooFewTracesError(CollectorError, ValueError):
    """Fewer judged traces than `MIN_TRACES`: limits from them would be guesses."""


def ceil_ms(value: float) -> float:
    """Round up to two significant digits, to whole milliseconds from 10 ms: 41.3 -> 42,
    117.6 -> 118, 3.96 -> 4, 0.731 -> 0.74. Never more than 10 % above, never below."""
    if value <= MIN_MS:
        return MIN_MS
    step = min(1.0, max(0.01, 10.0 ** (math.floor(math.log10(value)) - 1)))
    return round(math.ceil(round(value / step, 6)) * step, 2)


@dataclass(frozen=True, slots=True)
class Observed:
    """A stage's (or the TTFT's) times: the median and the percentile limits come from,
    each with its distribution-free interval (upper end None: beyond the largest value)."""

    count: int
    median_ms: float
    high_ms: float  # the common level's percentile
    median_interval: tuple[float, float | None]
    high_interval: tuple[float, float | None]


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
    level: float  # the common percentile of the limits (0..100)
    within: int  # traces within every limit when judged with the suggested numbers
    per_stage_within: int  # ... with each stage's objective percentile as its limit
    forced: bool = False  # made from fewer than MIN_TRACES traces on request

    @property
    def percentile_name(self) -> str:
        return f"p{self.level:g}"

    @property
    def share(self) -> float:
        return self.within / self.traces

    def budget(self) -> Budget:
        return replace(
            self.base,
            total_target_ms=self.total_target_ms,
            total_limit_ms=self.total_limit_ms,
            stages=tuple(s.stage for s in self.stages),
            slo_objective=self.objective,
        )


def _observe(values: list[float], level: float) -> Observed | None:
    if not values:
        return None
    ordered = sorted(values)
    return Observed(
        len(ordered),
        percentile(ordered, 50),
        percentile(ordered, level),
        quantile_interval(ordered, 50),
        quantile_interval(ordered, level),
    )


@dataclass(slots=True)
class _Judged:
    verdicts: list[Verdict] = field(default_factory=list)  # with a first token, not failed
    traces: list[list[Span]] = field(default_factory=list)  # theirs, in the same order
    left_out: dict[str, int] = field(default_factory=dict)  # status -> traces
    skipped: int = 0  # traces no stage matched


def _judge(budget: Budget, traces: list[list[Span]]) -> _Judged:
    evaluator = Evaluator(budget)
    judged = _Judged()
    for trace in traces:
        verdict = evaluator.evaluate(trace, evaluated_at=_EPOCH)
        if verdict is None:
            judged.skipped += 1
        elif verdict.status in (Status.ERROR, Status.INCOMPLETE) or verdict.ttft_ms is None:
            status = verdict.status.value
            judged.left_out[status] = judged.left_out.get(status, 0) + 1
        else:
            judged.verdicts.append(verdict)
            judged.traces.append(trace)
    return judged


def _within(budget: Budget, traces: list[list[Span]]) -> int:
    """How many of the traces `budget` judges within every limit (ok or warn)."""
    evaluator = Evaluator(budget)
    within = 0
    for trace in traces:
        verdict = evaluator.evaluate(trace, evaluated_at=_EPOCH)
        within += verdict is not None and verdict.status in (Status.OK, Status.WARN)
    return within


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


@dataclass(frozen=True, slots=True)
class Recognised:
    """The instrumentation most of the traces were made by, and those traces' spans."""

    preset: str
    traces: int  # of all the traces read
    of: int
    spans: list[Span]


def recognised(spans: Sequence[Span]) -> Recognised | None:
    """The library that traced more than half of the traces (its preset then gives the
    stages and the marks), or None: the span tree's structure gives them."""
    by_library: dict[str, list[list[Span]]] = {}
    traces = list(group_by_trace(spans).values())
    for trace in traces:
        found = recognize(trace)
        if found is not None:
            by_library.setdefault(found.preset, []).append(trace)
    if not by_library:
        return None
    preset, mine = max(by_library.items(), key=lambda item: len(item[1]))
    if 2 * len(mine) <= len(traces):
        return None
    return Recognised(preset, len(mine), len(traces), [s for trace in mine for s in trace])


def _with_limits(
    budget: Budget, limits: Limits, medians: dict[str, float], ttft_median: float
) -> Budget:
    """`budget` with these limits (rounded up) and the medians as targets; a stage no
    trace measured keeps its numbers. The total is TTFT's own: its median and the same
    percentile with the same headroom (stage percentiles do not add up to the total's:
    their sum would be a limit no trace comes near)."""
    stages = tuple(
        replace(
            stage,
            target_ms=ceil_ms(medians[stage.name]),
            limit_ms=ceil_ms(limits.stages[stage.name]),
        )
        if stage.name in limits.stages
        else stage
        for stage in budget.stages
    )
    total_limit = ceil_ms(limits.ttft)
    return replace(
        budget,
        stages=stages,
        total_target_ms=min(ceil_ms(ttft_median), total_limit),
        total_limit_ms=total_limit,
    )


def suggest(
    spans: Sequence[Span],
    *,
    objective: float,
    base: Budget | None = None,
    origin: str = "",
    min_traces: int = MIN_TRACES,
) -> Suggestion:
    """Numbers for `base`'s stages (or for stages from the structure when None) that hold
    `objective` jointly on these traces. Raises TooFewTracesError below `min_traces`."""
    if not 0 < objective < 1:
        raise ValueError(f"the objective must be between 0 and 1, got {objective}")
    traces = list(group_by_trace(spans).values())
    structural = base is None
    budget = _structure_budget(traces) if base is None else base
    judged = _judge(budget, traces)
    dropped: list[str] = []
    if structural:
        # A stage that never took time would only be noise: its spans go to their parent's.
        idle = [
            s.name
            for s in budget.stages
            if max(_stage_values(judged.verdicts, s.name), default=0) == 0
        ]
        if idle and len(idle) < len(budget.stages):
            budget = replace(budget, stages=tuple(s for s in budget.stages if s.name not in idle))
            dropped = idle
            judged = _judge(budget, traces)
    if not judged.verdicts:
        left_out = judged.left_out
        raise NoTracesError(
            "no trace with a first token matched a stage"
            + (f" ({sum(left_out.values())} failed or incomplete)" if left_out else "")
        )
    count = len(judged.verdicts)
    if count < min_traces:
        raise TooFewTracesError(
            f"{count} judged traces are too few to suggest limits from (at least {min_traces}:"
            " a high percentile of fewer is not bounded); --force suggests anyway"
        )
    values = {s.name: sorted(_stage_values(judged.verdicts, s.name)) for s in budget.stages}
    ttfts = sorted(v.ttft_ms for v in judged.verdicts if v.ttft_ms is not None)
    medians = {name: percentile(v, 50) for name, v in values.items() if v}
    ttft_median = percentile(ttfts, 50)
    within: dict[float, int] = {}

    def within_at(level: float) -> int:
        if level not in within:
            candidate = _with_limits(budget, limits_at(level, values, ttfts), medians, ttft_median)
            within[level] = _within(candidate, judged.traces)
        return within[level]

    level = find_level(objective, within_at, count)
    suggested = _with_limits(budget, limits_at(level, values, ttfts), medians, ttft_median)
    per_stage = limits_at(objective * 100, values, ttfts, headroom=0.0, floor_ms=MIN_MS)
    per_stage_within = _within(_with_limits(budget, per_stage, medians, ttft_median), judged.traces)
    total = _observe(ttfts, level)
    assert total is not None  # every kept verdict has a TTFT
    return Suggestion(
        objective=objective,
        origin=origin or "the span tree's structure",
        base=budget,
        traces=count,
        left_out=judged.left_out,
        skipped=judged.skipped,
        total=total,
        total_target_ms=suggested.total_target_ms,
        total_limit_ms=suggested.total_limit_ms,
        stages=tuple(
            StageSuggestion(stage, _observe(values[stage.name], level))
            for stage in suggested.stages
        ),
        dropped=tuple(dropped),
        level=level,
        within=within_at(level),
        per_stage_within=per_stage_within,
        forced=count < MIN_TRACES,
    )


def _sum(values: Iterable[float]) -> float:
    return round(sum(values), 2)


def _interval(interval: tuple[float, float | None]) -> str:
    low, high = interval
    upper = "beyond the largest" if high is None else f"{number(high)}"
    return f"{CONFIDENCE:.0%} interval {number(low)}–{upper}"


def _comment(
    what: str, observed: Observed, value: float, interval: tuple[float, float | None]
) -> str:
    return f"{what} of {observed.count} traces was {number(value)} ms ({_interval(interval)})"


def _limit_comment(high: str, observed: Observed, limit: float) -> str:
    said = _comment(high, observed, observed.high_ms, observed.high_interval)
    if observed.high_ms * (1 + HEADROOM) < FLOOR_MS <= limit:
        return f"{said}: raised to the {number(FLOOR_MS)} ms floor"
    return f"{said}, +{HEADROOM:.0%}"


def render(suggestion: Suggestion, *, extends: str | None = None) -> str:
    """The suggestion as budget.yaml text, a comment on every number saying where it came
    from and how sure it is. With `extends` (a preset's name) only the numbers are
    written, over that preset.

    The text is checked with the strict loader before it is returned.
    """
    s = suggestion
    high = s.percentile_name
    left = ", ".join(f"{n} {status}" for status, n in sorted(s.left_out.items()))
    objective = f"{s.objective * 100:g}%"
    lines = [
        f"# Suggested by `spanbudget budget suggest` from {s.traces} traces"
        + (f" ({left} left out)" if left else "")
        + (f"; {s.skipped} matched no stage" if s.skipped else "")
        + ".",
    ]
    if s.forced:
        lines.append(
            f"# Only {s.traces} traces (fewer than {MIN_TRACES}, --force): the limits' "
            "intervals below say how little they bound."
        )
    lines += [
        f"# Stages from {s.origin}. Targets are medians; limits the {high} of each stage's",
        f"# exclusive time on the critical path, +{HEADROOM:.0%} headroom, at least "
        f"{number(FLOOR_MS)} ms, rounded up.",
        f"# Judged with these numbers, {s.within} of {s.traces} traces ({s.share:.1%}) are "
        f"within every limit",
        f"# (objective {objective}): {high} is the lowest common percentile that holds it"
        + (" jointly." if s.share >= s.objective else "; even the largest values do not."),
        f"# Each stage's own p{s.objective * 100:g} as its limit would have kept "
        f"{s.per_stage_within} ({s.per_stage_within / s.traces:.1%}).",
        f"# Intervals: {CONFIDENCE:.0%}, distribution-free (order statistics).",
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
    lines.append("total:")
    lines.append(
        f"  target_ms: {number(s.total_target_ms)}  # "
        + _total_reason("p50", s.total, s.total.median_ms, s.total.median_interval)
    )
    lines.append(
        f"  limit_ms: {number(s.total_limit_ms)}  # "
        + _total_reason(high, s.total, s.total.high_ms, s.total.high_interval)
    )
    # What the loader adds up: the stages written, and with `extends` the preset's others.
    limits = _sum(item.stage.limit_ms for item in s.stages if item.observed is not None or extends)
    if limits > s.total_limit_ms:
        lines.append(
            f"  # The stage limits add up to {number(limits)} ms, above this: each is its own"
            f" stage's {high}, and percentiles do not add up (the slowest traces are slow in"
            " different stages), so the loader's warning of it is expected here."
        )
    lines.append("slo:")
    lines.append(
        f"  objective: {s.objective:g}  # {s.share:.1%} of these traces within every limit"
    )
    if extends is None and s.base.first_token != DEFAULT_FIRST_TOKEN:
        lines.append("first_token:")
        lines.extend(f"  - {render_mark(mark)}" for mark in s.base.first_token)
    lines.append("stages:")
    for item in s.stages:
        lines.extend(_stage_lines(item, high, full=extends is None))
    text = "\n".join(lines) + "\n"
    parse_budget(text, "the suggested budget")  # raises BudgetError if it would not load
    return text


def _total_reason(
    name: str, observed: Observed, value: float, interval: tuple[float, float | None]
) -> str:
    said = f"{name} of TTFT over {observed.count} traces was {number(value)} ms"
    return f"{said} ({_interval(interval)})" + ("" if name == "p50" else f", +{HEADROOM:.0%}")


def _stage_lines(item: StageSuggestion, high: str, *, full: bool) -> list[str]:
    stage, observed = item.stage, item.observed
    if observed is None and not full:
        return [
            f"  # {stage.name}: no trace had a span for it; the preset's "
            f"{number(stage.target_ms)} / {number(stage.limit_ms)} ms stay, outside the total"
        ]
    if observed is None:
        return [f"  # {stage.name}: no trace had a span for it: left out"]
    lines = [f"  - name: {scalar(stage.name)}"]
    lines.append(
        f"    target_ms: {number(stage.target_ms)}  # "
        + _comment("p50", observed, observed.median_ms, observed.median_interval)
    )
    lines.append(
        f"    limit_ms: {number(stage.limit_ms)}  # "
        + _limit_comment(high, observed, stage.limit_ms)
    )
    if full:
        if stage.when_absent is not WhenAbsent.ZERO:
            lines.append(f"    when_absent: {stage.when_absent.value}")
        selectors = ", ".join(render_selector(sel) for sel in stage.selectors)
        lines.append(f"    match: [{selectors}]")
    return lines
