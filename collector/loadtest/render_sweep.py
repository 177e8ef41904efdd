"""A sweep in the terminal: each step's p95 per stage, then the knee per stage, in 80
columns. Colours follow the stage table's bands; the marks say what colour cannot (`!`
decided over the limit, `?` not decided), so the tables read the same in a log file."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from spanbudget.common.terminal import print_wide

from ..stats import CONFIDENCE, min_count, wilson_interval
from .sweep import (
    SLO_ROW,
    TTFT_ROW,
    Decision,
    Knee,
    Sweep,
    SweepStep,
    rate_label,
)

__all__ = ["knee_cells", "render_sweep", "step_line"]

_MARK = {Decision.WITHIN: "", Decision.OVER: "!", Decision.NOT_DECIDED: "?", Decision.FEW: ""}
_STYLE = {
    Decision.WITHIN: "green",
    Decision.OVER: "bold red",
    Decision.NOT_DECIDED: "yellow",
    Decision.FEW: "dim",
}


def _ms(value: float) -> str:
    """Tenths below 100 ms, whole ms above: the columns keep to 80 when a step collapses."""
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _p95_cell(sweep: Sweep, step: SweepStep, row: str) -> Text:
    decision = sweep.decision(step, row)
    figure = sweep.figure(step, row)
    if decision is Decision.FEW or figure is None or figure.p95_ms is None:
        return Text("few", style="dim")
    return Text(f"{_ms(figure.p95_ms)}{_MARK[decision]}", style=_STYLE[decision])


def _share_cell(sweep: Sweep, step: SweepStep) -> Text:
    decision = sweep.decision(step, SLO_ROW)
    share = step.share
    text = "—" if share is None else f"{share:.1%}{_MARK[decision]}"
    return Text(text, style=_STYLE[decision])


def step_line(step: SweepStep, stage_names: Sequence[str]) -> str:
    """`8 req/s: 240 requests in 30.2 s (7.9/s), 0 errors, 96.7 % within every limit;
    p95 ms network 9.5, ...` — one line a finished step."""
    p95 = ", ".join(
        f"{name} {'—' if (v := step.stages[name].p95_ms) is None else f'{v:.1f}'}"
        for name in stage_names
    )
    share = "—" if step.share is None else f"{step.share:.1%}"
    return (
        f"{rate_label(step.rate)} req/s: {step.requests} requests in {step.duration_s:.1f} s "
        f"({step.sent_rps:.1f}/s), {step.errors} errors, {share} within every limit; "
        f"p95 ms {p95}"
    )


def step_table(sweep: Sweep) -> Table:
    """A row per step: the rate, the requests, each stage's p95, TTFT's and the share."""
    table = Table(
        title=f"sweep {sweep.run_id}: p95 ms per step, budget {sweep.budget_name}",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    table.add_column("req/s", justify="right", no_wrap=True)
    table.add_column("n", justify="right")
    for name in sweep.limits_ms:
        table.add_column(name, justify="right")
    table.add_column(TTFT_ROW, justify="right")
    table.add_column("within", justify="right")
    table.add_row(
        Text("limit", style="dim"),
        "",
        *(Text(f"{v:g}", style="dim") for v in sweep.limits_ms.values()),
        Text(f"{sweep.total_limit_ms:g}", style="dim"),
        Text(f"≥{sweep.objective:.0%}", style="dim"),
        end_section=True,
    )
    for step in sweep.steps:
        table.add_row(
            rate_label(step.rate),
            str(step.requests),
            *(_p95_cell(sweep, step, name) for name in sweep.limits_ms),
            _p95_cell(sweep, step, TTFT_ROW),
            _share_cell(sweep, step),
        )
    return table


def _rate(rate: float | None) -> str:
    return "—" if rate is None else rate_label(rate)


def knee_cells(sweep: Sweep, knee: Knee) -> tuple[str, str, str, str, str]:
    """`holds to`, `not decided`, `breaks at`, and the figure where the knee is (at the
    break, else where it was not decided, else the last step), with its interval."""
    holds = f"≥{_rate(knee.holds_to)}" if knee.held_throughout else _rate(knee.holds_to)
    at = knee.breaks_at or knee.undecided_at or (sweep.steps[-1].rate if sweep.steps else None)
    step = next((s for s in sweep.steps if s.rate == at), None)
    there = "—"
    if step is not None and knee.name == SLO_ROW:
        low, high = wilson_interval(step.within, step.requests)
        if step.share is not None:
            there = f"{step.share:.1%} ({100 * low:.1f}–{high:.1%})"
    elif step is not None:
        figure = sweep.figure(step, knee.name)
        if figure is not None and figure.p95_ms is not None:
            top = "?" if figure.high_ms is None else _ms(figure.high_ms)
            there = f"{_ms(figure.p95_ms)} ({_ms(figure.low_ms or 0.0)}–{top})"
        elif figure is not None:
            there = "no values"
    limit = f"{knee.limit:.0%}" if knee.name == SLO_ROW else f"{knee.limit:g}"
    return limit, holds, _rate(knee.undecided_at), _rate(knee.breaks_at), there


def knee_table(sweep: Sweep) -> Table:
    table = Table(
        title=f"knee per stage (req/s; p95 in ms, {CONFIDENCE:.0%} interval)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    table.add_column("stage", no_wrap=True)
    for column in ("limit", "holds to", "undecided", "breaks at"):
        table.add_column(column, justify="right")
    table.add_column("p95 there (interval)", justify="right")
    for knee in sweep.knees():
        label = "SLO share" if knee.name == SLO_ROW else knee.name
        table.add_row(
            Text(label, style="bold") if knee.name in (TTFT_ROW, SLO_ROW) else label,
            *knee_cells(sweep, knee),
            end_section=knee.name == list(sweep.limits_ms)[-1],
        )
    return table


def first_break_line(sweep: Sweep) -> str:
    first = sweep.first_break()
    doubtful = sorted(
        (
            (k.undecided_at, k.name)
            for k in sweep.knees()
            if k.undecided_at is not None and k.name in sweep.limits_ms
        ),
        key=lambda pair: pair[0],
    )
    if first is None:
        head = f"no stage went over its limit at p95 up to {_rate(sweep.steps[-1].rate)} req/s"
    else:
        name, rate = first
        step = next(s for s in sweep.steps if s.rate == rate)
        p95 = step.stages[name].p95_ms or 0.0
        head = (
            f"breaks first: {name}, p95 {p95:.1f} ms over its "
            f"{sweep.limits_ms[name]:g} ms limit at {_rate(rate)} req/s"
        )
    if doubtful and (first is None or doubtful[0][0] < first[1]):
        rate = doubtful[0][0]
        names = ", ".join(name for at, name in doubtful if at == rate)
        head += f"; not decided at {_rate(rate)} req/s: {names}"
    return head


def render_sweep(sweep: Sweep, console: Console) -> None:
    print_wide(console, step_table(sweep))
    console.print(
        f"! over the limit; ? not decided: the {CONFIDENCE:.0%} interval straddles it\n"
        f"  (p95: by order statistics; within every limit: Wilson's); few: under "
        f"{min_count(95)} values",
        style="dim",
    )
    print_wide(console, knee_table(sweep))
    console.print(
        "p95 there: where it breaks, else where not decided, else at the top rate",
        style="dim",
    )
    console.print(first_break_line(sweep), highlight=False)
    if sweep.failed:
        console.print(f"the sweep stopped early: {sweep.failed}", style="bold red")
