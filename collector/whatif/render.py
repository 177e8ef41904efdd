"""`spanbudget whatif`'s output: a table for people (80 columns), or JSON."""

from __future__ import annotations

import json

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from spanbudget.common.terminal import print_wide

from ..budget.model import Budget
from .predict import TTFT, Side, WhatIf

__all__ = ["blamed_next", "render_json", "render_table"]


def render_json(result: WhatIf, *, source: str = "") -> str:
    data = result.to_dict()
    data["blamed_next"] = blamed_next(result.after)
    if source:
        data["source"] = source
    return json.dumps(data, indent=2)


def blamed_next(side: Side) -> str | None:
    """The stage most often blamed first (file order breaks ties), None when none is."""
    best = max(side.blamed_first.items(), key=lambda item: item[1], default=(None, 0))
    return best[0] if best[1] else None


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _change(before: float | None, after: float | None) -> Text:
    if before is None or after is None:
        return Text("—", style="dim")
    delta = after - before
    if abs(delta) < 0.05:
        return Text("0.0", style="dim")
    return Text(f"{delta:+.1f}", style="green" if delta < 0 else "red")


def _share(side: Side) -> str:
    if not side.judged:
        return "—"
    low, high = side.interval
    return f"{side.within / side.judged:.1%} ({low:.1%}–{high:.1%})"


def render_table(result: WhatIf, budget: Budget, console: Console, *, source: str = "") -> None:
    """The p95 of each stage and of TTFT before and after, the blame counts, and the
    share within budget before and after with its Wilson interval."""
    changes = ", ".join(c.describe() for c in result.changes)
    n = len(result.pairs)
    title = f"what if {changes}: {n} traces" + (f" from {source}" if source else "")
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("stage", "limit", "p95 before", "p95 after", "change", "blamed before→after"):
        left = column == "stage"
        table.add_column(column, justify="left" if left else "right", no_wrap=left)
    before, after = result.before, result.after
    changed = {c.stage for c in result.changes}
    for stage in budget.stages:
        name = stage.name
        label = Text(
            name + (" *" if name in changed else ""), style="bold" if name in changed else ""
        )
        table.add_row(
            label,
            f"{stage.limit_ms:g}",
            _ms(before.p95_ms[name]),
            _ms(after.p95_ms[name]),
            _change(before.p95_ms[name], after.p95_ms[name]),
            f"{before.blamed_first[name]} → {after.blamed_first[name]}",
        )
    table.add_row(
        Text("TTFT", style="bold"),
        f"{budget.total_limit_ms:g}",
        _ms(before.p95_ms[TTFT]),
        _ms(after.p95_ms[TTFT]),
        _change(before.p95_ms[TTFT], after.p95_ms[TTFT]),
        "",
    )
    print_wide(console, table)
    console.print(
        "* changed; ms at p95; blamed: traces whose blame starts with the stage", style="dim"
    )
    confidence = f"{result.confidence:.0%}"
    console.print(f"within budget before: {before.within} of {n}, {_share(before)}")
    console.print(
        Text.assemble(
            "within budget after:  ",
            (f"{after.within} of {n}, {_share(after)}", "bold"),
            f"  ({confidence} Wilson intervals)",
        )
    )
    now, then = blamed_next(before), blamed_next(after)
    if then is None:
        console.print("blamed next: no stage (no trace over its limits after the change)")
    else:
        moved = "" if then == now else f" (was {now or 'none'})"
        console.print(
            f"blamed next: {then}, first in the blame of {after.blamed_first[then]} traces{moved}"
        )
    for name, count in result.not_shifted.items():
        if count:
            console.print(
                f"{name}: not shifted in {count} traces where it had no time on the critical "
                "path (a scale, xF, changes it there too)",
                style="yellow",
            )
    if result.skipped:
        console.print(f"{result.skipped} traces skipped (no span matched a stage)", style="dim")
