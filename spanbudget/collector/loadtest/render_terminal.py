"""The load-test report in the terminal: per stage against the budget, then the run's facts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

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


def _percentile_cells(
    summary: Mapping[str, float] | None, target: float, limit: float
) -> list[Text]:
    keys = ("p50", "p90", "p95", "p99", "max")
    if summary is None:
        return [Text("—", style="dim") for _ in keys]
    return [Text(_ms(summary[k]), style=_band(summary[k], target, limit)) for k in keys]


def render_terminal(report: Mapping[str, Any], console: Console) -> None:
    budget = report["budget"]
    total = budget["total"]
    table = Table(
        title=f"run {report['run_id']}: {report['requests']} requests to {report['target']}, "
        f"budget {budget['name']}",
        box=box.SIMPLE_HEAD,
    )
    for column in ("stage ms", "target", "limit", "p50", "p90", "p95", "p99", "max", ">limit"):
        left = column == "stage ms"
        table.add_column(column, justify="left" if left else "right", no_wrap=left)
    for stage in report["stages"]:
        share = stage["share_over_limit"]
        table.add_row(
            stage["name"],
            f"{stage['target_ms']:g}",
            f"{stage['limit_ms']:g}",
            *_percentile_cells(stage["ms"], stage["target_ms"], stage["limit_ms"]),
            Text(f"{share:.1%}", style="bold red" if share > 1 - budget["slo_objective"] else ""),
        )
    table.add_row(
        Text("TTFT", style="bold"),
        f"{total['target_ms']:g}",
        f"{total['limit_ms']:g}",
        *_percentile_cells(report["ttft_ms"], total["target_ms"], total["limit_ms"]),
        "",
        end_section=True,
    )
    for label, key in (
        ("client TTFT", "client_ttft_ms"),
        ("  from schedule", "client_ttft_sched_ms"),
        ("inter-token", "itl_ms"),
        ("request", "total_ms"),
    ):
        table.add_row(label, "", "", *_percentile_cells(report[key], 1e12, 1e12), "")
    print_wide(console, table)

    slo = report["slo"]
    verdict = Text(
        "met" if slo["met"] else "BREACHED", style="bold green" if slo["met"] else "bold red"
    )
    console.print(
        Text.assemble(
            "SLO: ",
            verdict,
            f" — {slo['within_limits']:.1%} of requests within every limit "
            f"(objective {slo['objective']:.0%}); goodput {report['goodput_rps']:.2f} req/s; "
            f"errors {report['errors']} ({report['error_rate']:.1%}); verdicts "
            f"{report['verdicts']['joined']}/{report['requests']} "
            f"{report['verdicts']['by_status']}",
        )
    )
    for phase in report["phases"]:
        p95 = ", ".join(f"{name} {_ms(value)}" for name, value in phase["stage_p95_ms"].items())
        console.print(
            f"phase {phase['name']}: {phase['requests']} requests, "
            f"{phase['within_limits']:.1%} within limits; p95 ms: {p95}"
        )
    if report["slowest"]:
        console.print("slowest traces:")
        for item in report["slowest"]:
            blame = ", ".join(item["blame"]) or "-"
            links = "  ".join(u for u in (item["ui_url"], item["jaeger_url"]) if u)
            console.print(
                f"  {item['trace_id']}  {item['ttft_ms']:.1f} ms  {item['status']}  "
                f"blame: {blame}  {links}",
                highlight=False,
            )
