"""`spanbudget compare`'s table for people: per stage, each statistic of both sides, the
difference and its interval, and the stage's verdict; then what was read and how."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from spanbudget.common.terminal import print_wide

from .comparison import Change, Comparison, StatComparison
from .rules import Finding
from .samples import Side

__all__ = ["CHANGE_STYLE", "render_terminal", "side_line"]

CHANGE_STYLE = {
    Change.SLOWER: "bold red",
    Change.FASTER: "green",
    Change.NONE: "dim",
    Change.FEW: "yellow",
    Change.UNMEASURED: "dim",
}
_SHORT = {
    Change.SLOWER: "slower",
    Change.FASTER: "faster",
    Change.NONE: "no change",
    Change.FEW: "few",
    Change.UNMEASURED: "unmeasured",
}


def side_line(side: Side) -> str:
    """`base: run runs/a (120 requests, 3 left out)`."""
    left = f", {side.left_out} left out (no timed verdict)" if side.left_out else ""
    return f"{side.label}: {side.kind} {side.source} ({len(side.samples)} requests{left})"


def _cells(stat: StatComparison) -> tuple[str, str, str, str]:
    if stat.name == "over":
        return (
            f"{stat.base * 100:.1f}%",
            f"{stat.candidate * 100:.1f}%",
            f"{stat.difference * 100:+.1f}pp",
            f"{stat.interval.low * 100:+.1f}..{stat.interval.high * 100:+.1f}",
        )
    if stat.few:
        return ("few", "few", f"{stat.difference:+.1f}", "")
    return (
        f"{stat.base:.1f}",
        f"{stat.candidate:.1f}",
        f"{stat.difference:+.1f}",
        f"{stat.interval.low:+.1f}..{stat.interval.high:+.1f}",
    )


def _table(comparison: Comparison) -> Table:
    primary = comparison.settings.primary
    table = Table(
        title=f"{comparison.candidate.label} against {comparison.base.label}, per stage (ms)",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        pad_edge=False,
        show_edge=False,
    )
    table.add_column("stage", no_wrap=True)
    table.add_column("stat", no_wrap=True)
    table.add_column(comparison.base.label[:10], justify="right", no_wrap=True)
    table.add_column(comparison.candidate.label[:10], justify="right", no_wrap=True)
    table.add_column("diff", justify="right", no_wrap=True)
    table.add_column(f"{comparison.interval_confidence:.1%} interval", justify="right")
    table.add_column("verdict", no_wrap=True)
    for stage in comparison.stages:
        if not stage.stats:
            table.add_row(
                stage.name,
                "",
                str(stage.base_count),
                str(stage.candidate_count),
                "",
                "",
                Text(_SHORT[stage.change], style=CHANGE_STYLE[stage.change]),
                end_section=True,
            )
            continue
        names = list(stage.stats)
        for i, name in enumerate(names):
            stat = stage.stats[name]
            verdict = (
                Text(_SHORT[stage.change], style=CHANGE_STYLE[stage.change])
                if name == primary
                else Text("")
            )
            table.add_row(
                stage.name if i == 0 else "",
                name,
                *_cells(stat),
                verdict,
                style=None if name == primary else "dim",
                end_section=i == len(names) - 1,
            )
    return table


def render_terminal(
    comparison: Comparison, console: Console, findings: list[Finding] | None = None
) -> None:
    s = comparison.settings
    console.print(side_line(comparison.base))
    console.print(side_line(comparison.candidate))
    print_wide(console, _table(comparison))
    console.print(
        f"verdict on {s.primary} only: slower/faster when its whole interval lies beyond "
        f"{s.min_effect_ms:g} ms and {s.min_effect_share:.0%} of the base; intervals: "
        f"bootstrap over requests, {s.resamples} resamples, seed {s.seed}, "
        f"{comparison.interval_confidence:.1%} each ({s.confidence:.0%} for all "
        f"{sum(1 for st in comparison.stages if st.stats)} stages together). over: share "
        "over the limit. few: too few requests to bound that percentile.",
        style="dim",
    )
    slower, faster = comparison.changed(Change.SLOWER), comparison.changed(Change.FASTER)
    quiet = comparison.changed(Change.NONE)
    parts = []
    if slower:
        parts.append(Text("slower: " + ", ".join(slower), style="bold red"))
    if faster:
        parts.append(Text("faster: " + ", ".join(faster), style="green"))
    if quiet:
        parts.append(Text("no detectable change: " + ", ".join(quiet)))
    few = comparison.changed(Change.FEW)
    if few:
        parts.append(Text("too few requests: " + ", ".join(few), style="yellow"))
    for part in parts:
        console.print(part)
    for finding in findings or []:
        if finding.fired:
            console.print(Text(f"FAIL {finding.rule}: {finding.detail}", style="bold red"))
        elif finding.undecided:
            console.print(Text(f"undecided {finding.rule}: {finding.detail}", style="yellow"))
