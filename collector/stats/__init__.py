"""Numbers over many traces: exact percentiles and the per-stage summary (`summary`), how
sure they are (`intervals`), and the per-stage table every command prints (`table`)."""

from spanbudget.collector.stats.intervals import (
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
from spanbudget.collector.stats.summary import PERCENTILES, StageSummary, percentile

__all__ = [
    "CONFIDENCE",
    "PERCENTILES",
    "SloDecision",
    "SloJudgement",
    "StageSummary",
    "decide_slo",
    "enough_for",
    "judge_slo",
    "min_count",
    "percentile",
    "quantile_interval",
    "wilson_interval",
]
