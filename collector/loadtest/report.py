"""The load-test report, computed from one record per request (pure: records in, report out).

Every stage figure is a `StageSummary`, the one `/api/summary` serves: over the limit
means the verdict's status `overrun`, and every stage statistic leaves out `incomplete`
verdicts, whose window is the whole request rather than the time to first token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..budget.model import Budget
from ..links import jaeger_trace_url, ui_trace_url
from ..stats import StageSummary
from .records import RequestResult, RequestVerdict
from .report_model import (
    PhaseLine,
    Report,
    RunInfo,
    SlowTrace,
    StageLine,
    WindowLine,
)

__all__ = ["build_report"]

SLOWEST = 5
OVER_TIME_WINDOW_S = 5.0


def build_report(results: Sequence[RequestResult], budget: Budget, info: RunInfo) -> Report:
    """The report of a run: its records, the budget they were judged by, the run's facts."""
    duration_s = info.duration_s
    info = replace(info, duration_s=round(duration_s, 3))  # as report.json keeps it
    total = len(results)
    judged = [(r, r.verdict) for r in results if r.verdict is not None]
    verdicts = [v for _, v in judged]
    good = sum(1 for v in verdicts if v.within_limits)
    by_status: dict[str, int] = {}
    for verdict in verdicts:
        by_status[verdict.status.value] = by_status.get(verdict.status.value, 0) + 1
    requests = [r.request for r in results]
    slowest = sorted(
        ((r, v) for r, v in judged if v.ttft_ms is not None),
        key=lambda pair: pair[1].ttft_ms or 0.0,
        reverse=True,
    )[:SLOWEST]
    return Report(
        info=info,
        budget_name=budget.name,
        total_target_ms=budget.total_target_ms,
        total_limit_ms=budget.total_limit_ms,
        slo_objective=budget.slo_objective,
        requests=total,
        errors=sum(1 for r in requests if not r.ok),
        joined=len(verdicts),
        by_status=by_status,
        within_limits=good / total if total else 0.0,
        goodput_rps=good / duration_s if duration_s > 0 else 0.0,
        ttft=StageSummary.of((v.ttft_ms, v.total_status) for v in verdicts),
        client_ttft=StageSummary.of_times(r.ttft_ms for r in requests if r.ttft_ms is not None),
        client_ttft_sched=StageSummary.of_times(
            r.ttft_sched_ms for r in requests if r.ttft_sched_ms is not None
        ),
        itl=StageSummary.of_times(r.itl_mean_ms for r in requests if r.itl_mean_ms is not None),
        request_total=StageSummary.of_times(r.total_ms for r in requests),
        stages=tuple(
            StageLine(s.name, s.target_ms, s.limit_ms, _stage(verdicts, s.name))
            for s in budget.stages
        ),
        phases=_phases(results, budget),
        stage_p95_over_time=_over_time(judged, budget),
        slowest=tuple(
            SlowTrace(
                trace_id=r.request.trace_id,
                ttft_ms=v.ttft_ms or 0.0,
                status=v.status.value,
                blame=v.blame,
                ui_url=ui_trace_url(info.ui_url, r.request.trace_id),
                jaeger_url=jaeger_trace_url(info.jaeger_ui, r.request.trace_id),
                context=v.context,
            )
            for r, v in slowest
        ),
    )


def _stage(verdicts: Sequence[RequestVerdict], name: str) -> StageSummary:
    """One stage over the verdicts whose stage times are shares of their TTFT."""
    return StageSummary.of(v.stages[name] for v in verdicts if v.timed and name in v.stages)


def _phases(results: Sequence[RequestResult], budget: Budget) -> tuple[PhaseLine, ...]:
    names: list[str] = []
    for result in results:
        if result.request.phase not in names:
            names.append(result.request.phase)
    lines = []
    for name in names:
        mine = [r for r in results if r.request.phase == name]
        verdicts = [r.verdict for r in mine if r.verdict is not None]
        good = sum(1 for v in verdicts if v.within_limits)
        lines.append(
            PhaseLine(
                name=name,
                requests=len(mine),
                within_limits=good / len(mine),
                stage_p95_ms={s.name: _stage(verdicts, s.name).p95_ms for s in budget.stages},
            )
        )
    return tuple(lines)


def _over_time(
    judged: Sequence[tuple[RequestResult, RequestVerdict]], budget: Budget
) -> tuple[WindowLine, ...]:
    """Each stage's p95 over consecutive windows of scheduled time."""
    timed = [(r.request.scheduled_s, v) for r, v in judged if v.timed]
    if not timed:
        return ()
    last = max(at for at, _ in timed)
    windows = []
    start = 0.0
    while start <= last:
        mine = [v for at, v in timed if start <= at < start + OVER_TIME_WINDOW_S]
        if mine:
            p95 = {s.name: _stage(mine, s.name).p95_ms for s in budget.stages}
            windows.append(WindowLine(start, len(mine), p95))
        start += OVER_TIME_WINDOW_S
    return tuple(windows)
