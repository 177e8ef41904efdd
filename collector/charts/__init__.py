"""The charts the web UI and `report.html` share: SVG from numbers (`svg`), coloured by the
classes of `charts.css`, which both pages include."""

from spanbudget.collector.charts.svg import (
    BandRow,
    BudgetRow,
    StackPart,
    band_class,
    budget_bars,
    esc,
    fmt_ms,
    histogram,
    nice_ticks,
    num,
    p95_panels,
    round_edges,
    stage_bands,
    stage_class,
    stage_stack,
    svg_root,
)

__all__ = [
    "BandRow",
    "BudgetRow",
    "StackPart",
    "band_class",
    "budget_bars",
    "esc",
    "fmt_ms",
    "histogram",
    "nice_ticks",
    "num",
    "p95_panels",
    "round_edges",
    "stage_bands",
    "stage_class",
    "stage_stack",
    "svg_root",
]
