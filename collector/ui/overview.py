"""The overview's numbers and charts for one time range (and run), from the verdict columns.

Pure apart from its inputs: a `ColumnSelection`, the budget, the alert rules' states and
the latest overruns; it returns what the template shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from ..budget.model import Budget
from ..charts import (
    BandRow,
    ShareRow,
    histogram,
    p95_panels,
    round_edges,
    share_bars,
    share_panels,
    stage_bands,
)
from ..stats import (
    MAX_SLICES,
    BudgetShare,
    Slices,
    min_count,
    slices_for,
)
from .columns import ColumnSelection

__all__ = [
    "MAX_SLICES",
    "SLICE_MIN_OVERRUNS",
    "Overview",
    "Slices",
    "build_overview",
    "excesses",
    "overview_slices",
    "period_text",
    "share_charts",
    "slices_for",
    "ttft_edges",
    "window_share",
]

HISTOGRAM_BINS = 40
# A slice's share of the blame is drawn only from this many overruns on: one overrun in a
# slice would draw 100 % for its stage and a cliff to the next slice.
SLICE_MIN_OVERRUNS = 5


@dataclass(frozen=True)
class Overview:
    traces: int
    status_counts: dict[str, int]
    within_limits: float | None
    objective: float
    stages: list[dict[str, Any]]  # name, target_ms, limit_ms and the /api/summary figures
    ttft: dict[str, Any]
    bands_svg: Markup
    histogram_svg: Markup
    panels_svg: Markup
    slices: Slices
    share: BudgetShare  # each stage's share of the TTFT and of the blame, per slice too
    share_svg: Markup
    share_panels_svg: Markup
    firing: list[Mapping[str, Any]]
    pending: int
    overruns: list[Mapping[str, Any]]
    run_ids: list[str]
    start: float
    end: float

    @property
    def slo_met(self) -> bool | None:
        return None if self.within_limits is None else self.within_limits >= self.objective

    @property
    def slice_min_overruns(self) -> int:
        return SLICE_MIN_OVERRUNS

    def share_sentence(self, since: str, run_id: str | None = None) -> str:
        """`In the last 15 min, retrieval took 31 % of the time to first token and 60 % of
        the blame (of 40 overruns).`"""
        text = self.share.sentence(period_text(since, run_id))
        return text[:1].upper() + text[1:] + "."


# The range selector's values, as the sentence under "where the budget goes" says them.
_PERIODS = {"15m": "15 min", "1h": "hour", "6h": "6 h", "24h": "24 h", "7d": "7 days"}


def period_text(since: str, run_id: str | None = None) -> str:
    """`in the last 15 min`, `in run demo-1`, `in everything kept`, `since 2026-…`."""
    if run_id:
        return f"in run {run_id}"
    if since == "all":
        return "in everything kept"
    if since in _PERIODS:
        return f"in the last {_PERIODS[since]}"
    if since[:-1].isdigit():
        return f"in the last {since}"
    return f"since {since}"


def overview_slices(
    selection: ColumnSelection, start: float, end: float, *, max_slices: int = MAX_SLICES
) -> Slices:
    """The over-time charts' slices: over the traces' own span (the range's when empty),
    each holding on average the traces a p95 needs, at most `max_slices` of them."""
    if len(selection):
        first, last = float(selection.at.min()), float(selection.at.max())
    else:
        first, last = start, end
    return slices_for(first, last, len(selection), per_slice=min_count(95), max_slices=max_slices)


def window_share(selection: ColumnSelection, budget: Budget, slices: Slices | None) -> BudgetShare:
    """Each stage of the budget (in its order) and `unattributed`: share of the TTFT and
    of the blame over the selection, per slice when `slices` are given."""
    return selection.share([s.name for s in budget.stages], slices)


def share_charts(share: BudgetShare, budget: Budget, slices: Slices) -> tuple[Markup, Markup]:
    """The bars (overall) and the small multiples (per slice) of a share."""
    colour = {s.name: i for i, s in enumerate(budget.stages)}
    bars = share_bars(
        [
            ShareRow(
                row.name,
                colour.get(row.name, -1),
                row.time_share,
                row.blame_share,
                row.blame_low,
                row.blame_high,
            )
            for row in share.stages
        ],
        traces=share.traces,
        overruns=share.overruns,
    )
    # A panel for each row that holds some of either (unattributed is mostly rounding).
    names = [r.name for r in share.stages if r.blamed or (r.time_share or 0.0) >= 0.005]
    panels = share_panels(
        slices.starts(),
        slices.end,
        [
            (
                name,
                colour.get(name, -1),
                [sl.time_share[name] for sl in share.slices],
                [
                    sl.blame_share[name] if sl.overruns >= SLICE_MIN_OVERRUNS else None
                    for sl in share.slices
                ],
            )
            for name in names
        ],
    )
    return bars, panels


def excesses(verdict: Mapping[str, Any]) -> list[tuple[str, float, str]]:
    """Each blamed stage of a verdict (its JSON form) with how far over it went: past its
    limit when it overran, else past its target (blamed because only the total overran).
    `(name, ms, "limit" | "target")`, in blame order."""
    stages = {s["name"]: s for s in verdict.get("stages", ())}
    out: list[tuple[str, float, str]] = []
    for name in verdict.get("blame", ()):
        stage = stages.get(name)
        if stage is None or stage.get("ms") is None:
            continue
        over_limit = stage["status"] == "overrun"
        mark = stage["limit_ms"] if over_limit else stage["target_ms"]
        out.append((name, round(stage["ms"] - mark, 2), "limit" if over_limit else "target"))
    return out


def ttft_edges(total_target_ms: float, total_limit_ms: float, p99_ms: float | None) -> list[float]:
    """Bins from 0 to past the limit (or the p99, if higher), at a round width."""
    top = max(total_limit_ms * 1.4, (p99_ms or 0.0) * 1.1, total_target_ms, 1.0)
    return round_edges(top, HISTOGRAM_BINS)


def build_overview(
    selection: ColumnSelection,
    budget: Budget,
    *,
    start: float,
    end: float,
    rules: Sequence[Mapping[str, Any]] = (),
    overruns: Sequence[Mapping[str, Any]] = (),
) -> Overview:
    stages: list[dict[str, Any]] = []
    for stage in budget.stages:
        figures = selection.describe(stage.name)
        row: dict[str, Any] = {
            "name": stage.name,
            "target_ms": stage.target_ms,
            "limit_ms": stage.limit_ms,
        }
        stages.append(row | figures)
    ttft = selection.describe(None)
    edges = ttft_edges(budget.total_target_ms, budget.total_limit_ms, ttft["p99_ms"])
    bands = stage_bands(
        [
            BandRow(s["name"], s["target_ms"], s["limit_ms"], s["p50_ms"], s["p95_ms"], s["p99_ms"])
            for s in stages
        ]
        + [
            BandRow(
                "TTFT",
                budget.total_target_ms,
                budget.total_limit_ms,
                ttft["p50_ms"],
                ttft["p95_ms"],
                ttft["p99_ms"],
            )
        ]
    )
    names = [s.name for s in budget.stages if s.name in selection.stage_ms]
    slices = overview_slices(selection, start, end)
    starts, series = selection.p95_over_time(names, slices.start, slices.end, slices.count)
    panels = p95_panels(
        starts,
        slices.end,
        [
            (s.name, i, s.target_ms, s.limit_ms, series[s.name])
            for i, s in enumerate(budget.stages)
            if s.name in series
        ],
    )
    share = window_share(selection, budget, slices)
    share_svg, share_panels_svg = share_charts(share, budget, slices)
    firing = [r for r in rules if r.get("state") == "firing"]
    return Overview(
        traces=len(selection),
        status_counts=selection.status_counts(),
        within_limits=selection.within_limits(),
        objective=budget.slo_objective,
        stages=stages,
        ttft=ttft,
        bands_svg=bands,
        histogram_svg=histogram(
            edges,
            selection.histogram(edges),
            target_ms=budget.total_target_ms,
            limit_ms=budget.total_limit_ms,
        ),
        panels_svg=panels,
        slices=slices,
        share=share,
        share_svg=share_svg,
        share_panels_svg=share_panels_svg,
        firing=firing,
        pending=sum(1 for r in rules if r.get("state") == "pending"),
        overruns=[{**v, "excess": excesses(v)} for v in overruns],
        run_ids=selection.run_ids,
        start=start,
        end=end,
    )
