"""Recorded traffic for the alert tests: verdicts second by second, as the collector hands
them to its alert engine, in segments of good requests and of retrieval overruns.

One request a second on the default rules (1 h/5 m, 6 h/30 m, 3 d/6 h):

- `COLD_START_BLIP`: the first 20 requests after a start overrun retrieval (cold caches),
  then 10 minutes of good traffic. Every window burns far over 14.4x at first (20 of 20
  over), but the burst is over after 20 s and good traffic dilutes the 5 m window under
  14.4x some 8 s later: 28 s of burning, under the fast page's 2 m `for`.
- `SUSTAINED`: the same start, then 20 minutes in which every request overruns, then good
  traffic until the 6 h window has forgotten the overruns. The 6x page burns from about
  minute 14 and fires 15 minutes later; the ticket (1x) fires 3 h into its burn; both
  resolve once, after their short windows have moved past the overruns and their hold.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict

from tests.support.traces import rag_trace

__all__ = ["COLD_START_BLIP", "SUSTAINED", "Segment", "replay"]


@dataclass(frozen=True)
class Segment:
    seconds: int
    per_second: int = 1
    retrieval_extra_ms: float = 0.0  # 30: retrieval takes 48 ms, over its 40 ms limit


COLD_START_BLIP = (Segment(20, retrieval_extra_ms=30), Segment(600))
SUSTAINED = (*COLD_START_BLIP, Segment(20 * 60, retrieval_extra_ms=30), Segment(9 * 3600))


def _template(evaluator: Evaluator, retrieval_extra_ms: float) -> Verdict:
    trace = rag_trace(retrieval=retrieval_extra_ms)
    verdict = evaluator.evaluate(trace.spans, evaluated_at=datetime.now(UTC))
    assert verdict is not None
    return verdict


def replay(budget: Budget, segments: Sequence[Segment]) -> Iterator[tuple[int, list[Verdict]]]:
    """(second since the start, the verdicts judged in that second), every trace id new."""
    evaluator = Evaluator(budget)
    second = 0
    count = 0
    for segment in segments:
        template = _template(evaluator, segment.retrieval_extra_ms)
        for _ in range(segment.seconds):
            batch = [
                replace(template, trace_id=f"{count + i:032x}") for i in range(segment.per_second)
            ]
            count += segment.per_second
            yield second, batch
            second += 1
