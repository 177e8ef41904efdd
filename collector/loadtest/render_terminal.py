"""The load-test report in the terminal: per stage against the budget, then the run's facts."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from spanbudget.common.terminal import print_wide

from ..judging.verdict import Status
from ..stats import CONFIDENCE, enough_for, min_count, wilson_interval
from ..stats.table import StageRow, few_note, has_few, slo_line, stage_table
from .report_model import PhaseLine, Report

__all__ = ["render_terminal"]


def _counts(by_status: Mapping[str, int]) -> str:
    """`77 ok, 60 warn, 37 overrun`: the statuses from the best to the worst."""
    order = {status.value: status.severity for status in Status}
    ranked = sorted(by_status.items(), key=lambda item: (order.get(item[0], 99), item[0]))
    return ", ".join(f"{n} {status}" for status, n in ranked if n) or "none"


def _phase_line(phase: PhaseLine) -> str:
    """`phase burst: 40 requests, 87.5 % within limits (95 % interval 73.9–94.5 %); p95 …`,
    the p95s only from enough requests to bound them."""
    within = round(phase.within_limits * phase.requests)
    low, high = wilson_interval(within, phase.requests)
    head = (
        f"phase {phase.name}: {phase.requests} requests, {phase.within_limits:.1%} within "
        f"limits ({CONFIDENCE:.0%} interval {low:.1%}–{high:.1%})"
    )
    if not enough_for(95, phase.requests):
        return f"{head}; p95: not enough requests ({min_count(95)} needed)"
    p95 = ", ".join(
        f"{name} {'—' if value is None else f'{value:.1f}'}"
        for name, value in phase.stage_p95_ms.items()
    )
    return f"{head}; p95 ms: {p95}"


def render_terminal(report: Report, console: Console) -> None:
    info = report.info
    table = stage_table(
        f"run {info.run_id}: {report.requests} requests to {info.target}, "
        f"budget {report.budget_name}",
        [StageRow(s.name, s.target_ms, s.limit_ms, s.summary) for s in report.stages],
        StageRow("TTFT", report.total_target_ms, report.total_limit_ms, report.ttft),
        objective=report.slo_objective,
        unlimited=(
            ("client TTFT", report.client_ttft),
            ("  from schedule", report.client_ttft_sched),
            ("inter-token", report.itl),
            ("request", report.request_total),
        ),
    )
    print_wide(console, table)
    summaries = [s.summary for s in report.stages] + [report.ttft, report.client_ttft]
    if has_few(summaries):
        console.print(few_note(), style="dim")
    within = round(report.within_limits * report.requests)
    console.print(slo_line(within, report.requests, report.slo_objective))
    console.print(
        f"goodput {report.goodput_rps:.2f} req/s; errors {report.errors} "
        f"({report.error_rate:.1%}); verdicts {report.joined}/{report.requests} "
        f"({_counts(report.by_status)})"
    )
    for phase in report.phases:
        console.print(_phase_line(phase))
    if report.slowest:
        console.print("slowest traces:")
        for item in report.slowest:
            blame = ", ".join(item.blame) or "-"
            links = "  ".join(u for u in (item.ui_url, item.jaeger_url) if u)
            console.print(
                f"  {item.trace_id}  {item.ttft_ms:.1f} ms  {item.status}  blame: {blame}  {links}",
                highlight=False,
            )
            if item.context:
                console.print(f"    {item.context}", highlight=False, style="dim")
