"""`spanbudget check`: judge traces read from files or from Jaeger, print, pick an exit code."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from spanbudget.collector.budget import Budget
from spanbudget.collector.evaluate import Evaluator
from spanbudget.collector.spans import Span, group_by_trace
from spanbudget.collector.verdict import Status, Verdict
from spanbudget.terminal import print_wide

__all__ = [
    "CheckResult",
    "FailOn",
    "evaluate_spans",
    "exit_code",
    "expand_paths",
    "render_json",
    "render_table",
]

STATUS_STYLE = {
    Status.OK: "green",
    Status.ABSENT: "dim",
    Status.UNMEASURED: "dim",
    Status.WARN: "yellow",
    Status.OVERRUN: "bold red",
    Status.ERROR: "bold magenta",
    Status.INCOMPLETE: "cyan",
}


class FailOn(enum.Enum):
    """The least severe trace status that makes `check` exit 1."""

    OVERRUN = "overrun"
    WARN = "warn"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class CheckResult:
    verdicts: list[Verdict]
    skipped: int  # traces in which no span matched any stage


def expand_paths(paths: Iterable[Path]) -> list[Path]:
    """Files as given; a directory stands for the files directly inside it, sorted."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.is_file()))
        else:
            files.append(path)
    return files


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
