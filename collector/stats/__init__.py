"""Numbers over many traces: exact percentiles and the per-stage summary (`summary`), how
sure they are (`intervals`), the per-stage table every command prints (`table`), each
stage's share of the time to first token and of the blame (`share`), and the round time
slices figures over time use (`slices`)."""

from .intervals import (
    CONFIDENCE,
    SloDecision,
    SloJudgement,
    decide_slo,
    enough_for,
    judge_slo,
    min_count,
    quantile_interval,
    wilson_interval,
)
from .share import (
    UNATTRIBUTED,
    BudgetShare,
    ShareRow,
    ShareSlice,
    StageShare,
    budget_share,
    share_of,
    share_over_time,
)
from .share_table import render_share
from .slices import MAX_SLICES, Slices, slices_for
from .summary import PERCENTILES, StageSummary, percentile

__all__ = [
    "CONFIDENCE",
    "MAX_SLICES",
    "PERCENTILES",
    "UNATTRIBUTED",
    "BudgetShare",
    "ShareRow",
    "ShareSlice",
    "Slices",
    "SloDecision",
    "SloJudgement",
    "StageShare",
    "StageSummary",
    "budget_share",
    "decide_slo",
    "enough_for",
    "judge_slo",
    "min_count",
    "percentile",
    "quantile_interval",
    "render_share",
    "share_of",
    "share_over_time",
    "slices_for",
    "wilson_interval",
]
