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
from spanbudget.collector.live.ui.charts import (
    BandRow,
    p95_panels,
    stage_bands,
    ttft_histogram,
)
from spanbudget.collector.live.verdict_columns import ColumnSelection

__all__ = ["Overview", "build_overview", "ttft_edges"]

OVER_TIME_SLICES = 36
HISTOGRAM_BINS = 40


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
    firing: list[Mapping[str, Any]]
    pending: int
    overruns: list[Mapping[str, Any]]
    run_ids: list[str]
    start: float
    end: float

    @property
    def slo_met(self) -> bool | None:
        return None if self.within_limits is None else self.within_limits >= self.objective


def ttft_edges(total_target_ms: float, total_limit_ms: float, p99_ms: float | None) -> list[float]:
    """Bins from 0 to past the limit (or the p99, if higher), at a round width."""
    top = max(total_limit_ms * 1.4, (p99_ms or 0.0) * 1.1, total_target_ms, 1.0)
    raw = top / HISTOGRAM_BINS
    magnitude = 10 ** math.floor(math.log10(raw))
    width = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    count = math.ceil(top / width)
    return [i * width for i in range(count + 1)]


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
    starts, series = selection.p95_over_time(names, start, end, OVER_TIME_SLICES)
    panels = p95_panels(
        starts,
        end,
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
        histogram_svg=ttft_histogram(
            edges,
            selection.histogram(edges),
            target_ms=budget.total_target_ms,
            limit_ms=budget.total_limit_ms,
        ),
        panels_svg=panels,
        firing=firing,
        pending=sum(1 for r in rules if r.get("state") == "pending"),
        overruns=list(overruns),
        run_ids=selection.run_ids,
        start=start,
        end=end,
    )
