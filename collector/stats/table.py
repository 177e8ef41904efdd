"""The per-stage table and the SLO line, as `check` and `loadtest` print them.

One layout for both, so that a run's report and a folder of traces read alike: a row per
stage with its target, limit, percentiles coloured by band and the share over the limit,
then the time to first token. A percentile that too few values bound (`intervals.
min_count`) shows as `few`, not as a number; the SLO line gives its share with a Wilson
interval and calls the objective met or breached only when the interval is on one side.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.table import Table
from rich.text import Text

from .intervals import (
    CONFIDENCE,
    SloDecision,
    decide_slo,
    enough_for,
    min_count,
    wilson_interval,
)
from .summary import StageSummary

__all__ = ["FEW", "StageRow", "few_note", "has_few", "slo_line", "stage_table"]

FEW = "few"  # a percentile cell with too few values behind it
_QUANTILES = (50, 90, 95, 99)
_NO_LIMIT = float("inf")


@dataclass(frozen=True, slots=True)
class StageRow:
    """A row: a stage (or the time to first token) against its target and limit."""

    name: str
    target_ms: float
    limit_ms: float
    summary: StageSummary


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _band(value: float | None, target: float, limit: float) -> str:
    if value is None:
        return "dim"
    if value <= target:
        return "green"
    return "yellow" if value <= limit else "bold red"


def _cells(summary: StageSummary, target: float, limit: float) -> list[Text]:
    values = (summary.p50_ms, summary.p90_ms, summary.p95_ms, summary.p99_ms)
    cells = [
        Text(FEW, style="dim")
        if value is not None and not enough_for(q, summary.count)
        else Text(_ms(value), style=_band(value, target, limit))
        for q, value in zip(_QUANTILES, values, strict=True)
    ]
    cells.append(Text(_ms(summary.max_ms), style=_band(summary.max_ms, target, limit)))
    return cells


def has_few(summaries: Sequence[StageSummary]) -> bool:
    """Whether a table of these summaries shows a `few` cell."""
    return any(s.count and not enough_for(q, s.count) for s in summaries for q in _QUANTILES)


def few_note() -> str:
    """What `few` means, for under a table that shows one."""
    counts = ", ".join(f"p{q} {min_count(q)}" for q in _QUANTILES[1:])
    return (
        f"few: fewer values than that percentile needs ({counts}: the fewest whose "
        f"largest bounds it with {CONFIDENCE:.0%} confidence)"
    )


def stage_table(
    title: str,
    stages: Sequence[StageRow],
    ttft: StageRow,
    *,
    objective: float,
    unlimited: Sequence[tuple[str, StageSummary]] = (),
) -> Table:
    """Stages, then the time to first token, then times judged against no limit (the load
    tester's own measurements). `>limit` turns red past 1 - the objective."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("stage ms", "target", "limit", "p50", "p90", "p95", "p99", "max", ">limit"):
        left = column == "stage ms"
        table.add_column(column, justify="left" if left else "right", no_wrap=left)
    for stage in stages:
        share = stage.summary.over_limit_share
        table.add_row(
            stage.name,
            f"{stage.target_ms:g}",
            f"{stage.limit_ms:g}",
            *_cells(stage.summary, stage.target_ms, stage.limit_ms),
            Text("—", style="dim")
            if share is None
            else Text(f"{share:.1%}", style="bold red" if share > 1 - objective else ""),
        )
    table.add_row(
        Text(ttft.name, style="bold"),
        f"{ttft.target_ms:g}",
        f"{ttft.limit_ms:g}",
        *_cells(ttft.summary, ttft.target_ms, ttft.limit_ms),
        "",
        end_section=bool(unlimited),
    )
    for label, summary in unlimited:
        table.add_row(label, "", "", *_cells(summary, _NO_LIMIT, _NO_LIMIT), "")
    return table


def slo_line(within: int, n: int, objective: float, *, noun: str = "requests") -> Text:
    """`SLO: met — 198 of 200 requests within every limit, 99.0 % (95 % interval
    96.4–99.7 %, Wilson); objective 95 %`, decided as `decide_slo` decides."""
    low, high = wilson_interval(within, n)
    decision = decide_slo(within, n, objective)
    verdict = {
        SloDecision.MET: Text("met", style="bold green"),
        SloDecision.BREACHED: Text("BREACHED", style="bold red"),
        SloDecision.NOT_DECIDED: Text("not decided", style="bold yellow"),
    }[decision]
    share = f"{within / n:.1%}" if n else "—"
    tail = (
        f"; too few {noun} to tell it from the objective"
        if decision is SloDecision.NOT_DECIDED
        else ""
    )
    return Text.assemble(
        "SLO: ",
        verdict,
        f" — {within} of {n} {noun} within every limit, {share} ({CONFIDENCE:.0%} interval "
        f"{low:.1%}–{high:.1%}, Wilson); objective {objective:.0%}{tail}",
    )
