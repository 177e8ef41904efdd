"""`spanbudget check`'s output: the verdicts as JSON, or as a table for people."""

from __future__ import annotations

import json

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from spanbudget.collector.budget.model import Budget
from spanbudget.collector.check.judge import CheckResult
from spanbudget.collector.judging.verdict import Status
from spanbudget.terminal import print_wide

__all__ = ["STATUS_STYLE", "render_json", "render_table"]

STATUS_STYLE = {
    Status.OK: "green",
    Status.ABSENT: "dim",
    Status.UNMEASURED: "dim",
    Status.WARN: "yellow",
    Status.OVERRUN: "bold red",
    Status.ERROR: "bold magenta",
    Status.INCOMPLETE: "cyan",
}


def render_json(result: CheckResult) -> str:
    return json.dumps([v.to_dict() for v in result.verdicts], indent=2)


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def render_table(result: CheckResult, budget: Budget, console: Console) -> None:
    """One row per trace: status, TTFT, each stage's ms coloured by status, blame.

    Trace ids are shown whole when the terminal is wide enough to keep them searchable in
    Jaeger, and cut to 8 characters otherwise (`--format json` always has them whole).
    """
    id_width = 32 if console.width >= 140 else 8
    table = Table(
        title=f"budget {budget.name}: TTFT target {budget.total_target_ms:g} ms, "
        f"limit {budget.total_limit_ms:g} ms",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        pad_edge=False,
        show_edge=False,
    )
    table.add_column("trace", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("TTFT", justify="right", no_wrap=True)
    for stage in budget.stages:
        table.add_column(stage.name, justify="right", no_wrap=True)
    # Time no stage claims is usually nil; its column only shows when there is some.
    show_other = any(v.unattributed_ms for v in result.verdicts)
    if show_other:
        table.add_column("other", justify="right", no_wrap=True)
    table.add_column("blame", min_width=7, overflow="fold")
    table.add_row(
        "",
        "limit ms",
        f"{budget.total_limit_ms:g}",
        *(f"{stage.limit_ms:g}" for stage in budget.stages),
        *([""] if show_other else []),
        "",
        style="dim",
        end_section=True,
    )
    for verdict in result.verdicts:
        cells: list[Text | str] = [
            verdict.trace_id[:id_width],
            Text(verdict.status.value, style=STATUS_STYLE[verdict.status]),
            Text(_ms(verdict.ttft_ms), style=STATUS_STYLE[verdict.total_status]),
        ]
        cells += [Text(_ms(s.ms), style=STATUS_STYLE[s.status]) for s in verdict.stages]
        if show_other:
            cells.append(_ms(verdict.unattributed_ms))
        cells.append(", ".join(verdict.blame))
        table.add_row(*cells)
    print_wide(console, table)
    counts: dict[str, int] = {}
    for verdict in result.verdicts:
        counts[verdict.status.value] = counts.get(verdict.status.value, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none"
    console.print(
        f"{len(result.verdicts)} traces judged ({summary}); {result.skipped} skipped "
        "(no span matched a stage)"
    )
