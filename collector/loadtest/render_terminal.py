"""The load-test report in the terminal: per stage against the budget, then the run's facts."""

from __future__ import annotations

from collections.abc import Mapping

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from spanbudget.collector.judging.verdict import Status
from spanbudget.collector.loadtest.report_model import Report
from spanbudget.collector.stats import StageSummary
from spanbudget.terminal import print_wide

__all__ = ["render_terminal"]


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _band(value: float | None, target: float, limit: float) -> str:
    if value is None:
        return "dim"
    if value <= target:
        return "green"
    return "yellow" if value <= limit else "bold red"


def _percentile_cells(summary: StageSummary, target: float, limit: float) -> list[Text]:
    values = (summary.p50_ms, summary.p90_ms, summary.p95_ms, summary.p99_ms, summary.max_ms)
    return [Text(_ms(value), style=_band(value, target, limit)) for value in values]


def _counts(by_status: Mapping[str, int]) -> str:
    """`77 ok, 60 warn, 37 overrun`: the statuses from the best to the worst."""
    order = {status.value: status.severity for status in Status}
    ranked = sorted(by_status.items(), key=lambda item: (order.get(item[0], 99), item[0]))
    return ", ".join(f"{n} {status}" for status, n in ranked if n) or "none"


def render_terminal(report: Report, console: Console) -> None:
    info = report.info
    table = Table(
        title=f"run {info.run_id}: {report.requests} requests to {info.target}, "
        f"budget {report.budget_name}",
        box=box.SIMPLE_HEAD,
    )
    for column in ("stage ms", "target", "limit", "p50", "p90", "p95", "p99", "max", ">limit"):
        left = column == "stage ms"
        table.add_column(column, justify="left" if left else "right", no_wrap=left)
    for stage in report.stages:
        share = stage.summary.over_limit_share
        table.add_row(
            stage.name,
            f"{stage.target_ms:g}",
            f"{stage.limit_ms:g}",
            *_percentile_cells(stage.summary, stage.target_ms, stage.limit_ms),
            Text("—", style="dim")
            if share is None
            else Text(f"{share:.1%}", style="bold red" if share > 1 - report.slo_objective else ""),
        )
    table.add_row(
        Text("TTFT", style="bold"),
        f"{report.total_target_ms:g}",
        f"{report.total_limit_ms:g}",
        *_percentile_cells(report.ttft, report.total_target_ms, report.total_limit_ms),
        "",
        end_section=True,
    )
    for label, summary in (
        ("client TTFT", report.client_ttft),
        ("  from schedule", report.client_ttft_sched),
        ("inter-token", report.itl),
        ("request", report.request_total),
    ):
        table.add_row(label, "", "", *_percentile_cells(summary, 1e12, 1e12), "")
    print_wide(console, table)

    met = report.slo_met
    verdict = Text("met" if met else "BREACHED", style="bold green" if met else "bold red")
    console.print(
        Text.assemble(
            "SLO: ",
            verdict,
            f" — {report.within_limits:.1%} of requests within every limit "
            f"(objective {report.slo_objective:.0%}); goodput {report.goodput_rps:.2f} req/s; "
            f"errors {report.errors} ({report.error_rate:.1%}); verdicts "
            f"{report.joined}/{report.requests} ({_counts(report.by_status)})",
        )
    )
    for phase in report.phases:
        p95 = ", ".join(f"{name} {_ms(value)}" for name, value in phase.stage_p95_ms.items())
        console.print(
            f"phase {phase.name}: {phase.requests} requests, "
            f"{phase.within_limits:.1%} within limits; p95 ms: {p95}"
        )
    if report.slowest:
        console.print("slowest traces:")
        for item in report.slowest:
            blame = ", ".join(item.blame) or "-"
            links = "  ".join(u for u in (item.ui_url, item.jaeger_url) if u)
            console.print(
                f"  {item.trace_id}  {item.ttft_ms:.1f} ms  {item.status}  blame: {blame}  {links}",
                highlight=False,
            )
