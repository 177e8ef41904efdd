"""The overview's numbers and charts for one time range (and run), from the verdict columns.

Pure apart from its inputs: a `ColumnSelection`, the budget, the alert rules' states and
the latest overruns; it returns what the template shows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from spanbudget.collector.budget.model import Budget
from spanbudget.collector.charts import (
    BandRow,
    histogram,
    p95_panels,
    round_edges,
    stage_bands,
)
from spanbudget.collector.live.verdict_columns import ColumnSelection
from spanbudget.collector.stats import min_count

__all__ = ["Overview", "Slices", "build_overview", "excesses", "slices_for", "ttft_edges"]

MAX_SLICES = 36
HISTOGRAM_BINS = 40
# Slice widths the over-time chart picks from, seconds: round ones, so slices line up with
# the clock (…, 10 s, 15 s, 30 s, 1 min, …, 1 h, …, 1 d).
_WIDTHS = (
    *(1, 2, 5, 10, 15, 30),  # seconds
    *(60, 120, 300, 600, 900, 1800),  # minutes
    *(3600, 7200, 10800, 21600, 43200, 86400),  # hours, a day
)


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
    firing: list[Mapping[str, Any]]
    pending: int
    overruns: list[Mapping[str, Any]]
    run_ids: list[str]
    start: float
    end: float

    @property
    def slo_met(self) -> bool | None:
        return None if self.within_limits is None else self.within_limits >= self.objective


@dataclass(frozen=True, slots=True)
class Slices:
    """The over-time chart's slices: `count` of `width` seconds from `start`, sized so
    that each holds on average the `per_slice` traces a p95 needs to be bounded."""

    start: float
    width: float
    count: int
    per_slice: int

    @property
    def end(self) -> float:
        return self.start + self.width * self.count

    def describe(self) -> str:
        """`15 s`, `5 min`, `1 h`: the width for people."""
        w = int(self.width)
        if w % 3600 == 0:
            return f"{w // 3600} h"
        if w % 60 == 0:
            return f"{w // 60} min"
        return f"{w} s"


def slices_for(first: float, last: float, traces: int, *, per_slice: int) -> Slices:
    """Slices over the time the traces span (not the whole range: a 30 s run in the 1 h
    range gets slices of seconds, not one of minutes): the narrowest round width that
    gives at most `MAX_SLICES` slices and, on average, `per_slice` traces in each; aligned
    to the clock."""
    span = max(last - first, 1.0)
    wanted = max(span / MAX_SLICES, span * per_slice / max(traces, 1))
    width = next((float(w) for w in _WIDTHS if w >= wanted), float(_WIDTHS[-1]))
    while span / width > MAX_SLICES:  # beyond a day's width: whole days
        width += _WIDTHS[-1]
    start = math.floor(first / width) * width
    count = max(1, math.ceil((last - start) / width + 1e-9))
    if start + count * width <= last:  # the last trace sits on the edge: one more slice
        count += 1
    return Slices(start, width, count, per_slice)


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
    if len(selection):
        first, last = float(selection.at.min()), float(selection.at.max())
    else:
        first, last = start, end
    slices = slices_for(first, last, len(selection), per_slice=min_count(95))
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
        firing=firing,
        pending=sum(1 for r in rules if r.get("state") == "pending"),
        overruns=[{**v, "excess": excesses(v)} for v in overruns],
        run_ids=selection.run_ids,
        start=start,
        end=end,
    )
