"""Judge traces, change their stages (`transform.retime`), judge them again with the same
evaluator, and sum both sides up. Pure: spans and a budget in, a `WhatIf` out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..budget.model import Budget
from ..judging.evaluate import Evaluator
from ..judging.verdict import Status, Verdict
from ..spans import Span
from ..stats import CONFIDENCE, percentile, wilson_interval
from .change import StageChange
from .transform import retime

__all__ = ["Pair", "Side", "WhatIf", "change_trace", "predict"]

TTFT = "ttft"  # the key of the time to first token beside the stages' names


@dataclass(frozen=True, slots=True)
class Pair:
    """One trace's verdict before and after the change."""

    before: Verdict
    after: Verdict


@dataclass(frozen=True, slots=True)
class Side:
    """Every trace before, or after: the share within budget and its interval, each
    stage's and TTFT's p95 (None without a measured value), and the blame counts."""

    within: int
    judged: int
    interval: tuple[float, float]
    p95_ms: Mapping[str, float | None]
    blamed_first: Mapping[str, int]  # traces whose blame starts with the stage
    blamed: Mapping[str, int]  # traces whose blame names the stage anywhere

    @property
    def share(self) -> float | None:
        return self.within / self.judged if self.judged else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "within_budget": self.within,
            "judged": self.judged,
            "share": self.share,
            "interval": list(self.interval),
            "p95_ms": dict(self.p95_ms),
            "blamed_first": dict(self.blamed_first),
            "blamed": dict(self.blamed),
        }


@dataclass(frozen=True, slots=True)
class WhatIf:
    """Every judged trace before and after the changes, and both sides summed up."""

    changes: tuple[StageChange, ...]
    pairs: tuple[Pair, ...]
    before: Side
    after: Side
    not_shifted: Mapping[str, int]  # per shifted stage: traces where it had no time to shift
    skipped: int  # traces in which no span matched any stage (not judged, DESIGN §5 rule 0)
    confidence: float = CONFIDENCE

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": [c.describe() for c in self.changes],
            "traces": len(self.pairs),
            "skipped": self.skipped,
            # Both sides are judged at one `evaluated_at`: equal verdicts mean no change.
            "changed_verdicts": sum(1 for p in self.pairs if p.after != p.before),
            "confidence": self.confidence,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "not_shifted": dict(self.not_shifted),
        }


def within_budget(verdict: Verdict) -> bool:
    """Within every limit, as the SLO counts it (`check`'s and the load test's rule)."""
    return verdict.status in (Status.OK, Status.WARN)


def change_trace(
    evaluator: Evaluator,
    spans: Sequence[Span],
    changes: Mapping[str, StageChange],
    *,
    evaluated_at: datetime,
) -> tuple[Pair, tuple[str, ...]] | None:
    """One trace before and after (None: not judged), and the shifted stages that had no
    time in it to shift (`StageChange.factor_for`)."""
    judged = evaluator.judge(spans, evaluated_at=evaluated_at)
    if judged is None:
        return None
    before = judged.verdict
    factors: dict[str, float] = {}
    unshifted: list[str] = []
    for name, change in changes.items():
        stage = before.stage(name)
        factor = change.factor_for(stage.ms or 0.0)
        if factor is None:
            unshifted.append(name)
        elif factor != 1.0:
            factors[name] = factor
    if not factors:
        return Pair(before, before), tuple(unshifted)
    factor_of = {
        span_id: factors[stage] for span_id, stage in judged.span_stages.items() if stage in factors
    }
    moved = retime(spans, judged.root_span_id, factor_of, evaluator.budget.first_token)
    after = evaluator.evaluate(moved, evaluated_at=evaluated_at)
    assert after is not None  # the same spans match the same stages
    return Pair(before, after), tuple(unshifted)


def _side(verdicts: Sequence[Verdict], stage_names: Sequence[str]) -> Side:
    within = sum(1 for v in verdicts if within_budget(v))
    p95: dict[str, float | None] = {}
    timed = [v for v in verdicts if v.ttft_ms is not None]
    for name in stage_names:
        values = sorted(ms for v in timed if (ms := v.stage(name).ms) is not None)
        p95[name] = round(percentile(values, 95), 2) if values else None
    ttfts = sorted(v.ttft_ms for v in timed if v.ttft_ms is not None)
    p95[TTFT] = round(percentile(ttfts, 95), 2) if ttfts else None
    first = dict.fromkeys(stage_names, 0)
    anywhere = dict.fromkeys(stage_names, 0)
    for verdict in verdicts:
        if verdict.blame:
            first[verdict.blame[0]] += 1
        for name in verdict.blame:
            anywhere[name] += 1
    return Side(within, len(verdicts), wilson_interval(within, len(verdicts)), p95, first, anywhere)


def predict(
    traces: Sequence[Sequence[Span]],
    budget: Budget,
    changes: Mapping[str, StageChange],
    *,
    evaluated_at: datetime,
    evaluator: Evaluator | None = None,
) -> WhatIf:
    """Every trace judged, changed and judged again; the two sides summed up."""
    evaluator = evaluator or Evaluator(budget)
    pairs: list[Pair] = []
    not_shifted = {name: 0 for name, c in changes.items() if c.shift_ms is not None}
    skipped = 0
    for spans in traces:
        result = change_trace(evaluator, spans, changes, evaluated_at=evaluated_at)
        if result is None:
            skipped += 1
            continue
        pair, unshifted = result
        pairs.append(pair)
        for name in unshifted:
            not_shifted[name] += 1
    names = budget.stage_names()
    return WhatIf(
        tuple(changes.values()),
        tuple(pairs),
        _side([p.before for p in pairs], names),
        _side([p.after for p in pairs], names),
        not_shifted,
        skipped,
    )
