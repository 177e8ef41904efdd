"""Where the budget went, in the terminal: a row per stage with its share of the summed time
to first token and of the overruns' blame, the sentence, then both shares per time slice.
`spanbudget report` prints it for a run and for trace files alike."""

from __future__ import annotations

from collections.abc import Callable

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from spanbudget.common.terminal import print_wide

from .share import BudgetShare

__all__ = ["render_share"]


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _whole(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}"


def render_share(
    share: BudgetShare,
    console: Console,
    *,
    title: str,
    period: str,
    clock: Callable[[float], str],
) -> None:
    """The budget share: a row per stage (and unattributed) with its summed ms and share
    of the summed TTFT, the overruns it is first blamed for, their share and its interval;
    the sentence; then both shares per time slice (`clock` names a slice's start)."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("stage", "ms", "of TTFT", "traces", "blamed", "of blame", "interval"):
        table.add_column(column, justify="left" if column == "stage" else "right", no_wrap=True)
    for row in share.stages:
        interval = (
            ""
            if row.blame_share is None
            else f"{row.blame_low:.0%}–{row.blame_high:.0%}" + (" few" if row.wide else "")
        )
        table.add_row(
            Text(row.name, style="italic" if row.name == "unattributed" else ""),
            f"{row.ms:,.1f}",
            _share(row.time_share),
            str(row.measured),
            str(row.blamed),
            Text(_share(row.blame_share), style="bold" if row.blamed else ""),
            Text(interval, style="dim"),
        )
    print_wide(console, table)
    text = share.sentence(period)
    console.print(text[:1].upper() + text[1:] + ".", highlight=False)
    console.print(
        f"of TTFT: summed exclusive ms over the summed TTFT of {share.traces} traces with a "
        f"first token; of blame: overruns whose blame names the stage first, of "
        f"{share.overruns}, with its {share.confidence:.0%} (Wilson) interval"
        + ("; few: an interval wider than 20 points" if any(r.wide for r in share.stages) else ""),
        style="dim",
        highlight=False,
    )
    if len(share.slices) < 2:
        return
    names = [r.name for r in share.stages if r.blamed or (r.time_share or 0.0) >= 0.005]
    over_time = Table(
        title=f"share of TTFT / of blame (%), per {share.slice_width_s:g} s slice",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for column in ("slice", "traces", "overruns", *names):
        over_time.add_column(column, justify="left" if column == "slice" else "right")
    for piece in share.slices:
        over_time.add_row(
            clock(piece.start),
            str(piece.traces),
            str(piece.overruns),
            *(f"{_whole(piece.time_share[n])}/{_whole(piece.blame_share[n])}" for n in names),
        )
    print_wide(console, over_time)
