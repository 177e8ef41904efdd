"""A load-test run's records and verdicts, made up from the reference trace: for the
report's, `check`'s and the demo's output tests."""

from __future__ import annotations

from datetime import UTC, datetime

from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.loadtest.client import RequestRecord
from spanbudget.collector.loadtest.records import RequestResult, join
from spanbudget.collector.loadtest.report_model import RunInfo

from tests.support.traces import rag_trace


def make_verdicts(budget: Budget, count: int = 60) -> list[Verdict]:
    """Verdicts of the reference path: some over their limits, some server-only (network
    unmeasured), some without a first token."""
    evaluator = Evaluator(budget)
    verdicts = []
    for i in range(count):
        trace_id = f"{i + 1:032x}"
        spans = rag_trace(
            trace_id=trace_id,
            retrieval=i % 30,
            queue=(i * 7) % 60,
            client_root=i % 9 != 4,
            marks=i % 13 != 6,
        ).spans
        verdict = evaluator.evaluate(spans, evaluated_at=datetime.now(UTC))
        assert verdict is not None
        verdicts.append(verdict)
    return verdicts


def make_results(budget: Budget, count: int = 60) -> list[RequestResult]:
    records = []
    for i in range(count):
        trace_id = f"{i + 1:032x}"
        record = RequestRecord(
            index=i,
            phase="nominal" if i < 40 else "burst",
            scheduled_s=i * 0.25,
            sent_s=i * 0.25 + 0.001,
            status_code=200,
            ttft_ms=150.0 + i,
            ttft_sched_ms=151.0 + i,
            itl_mean_ms=20.0,
            itl_p95_ms=25.0,
            total_ms=900.0,
            total_sched_ms=901.0,
            output_tokens=32,
            prompt_tokens=300 + i,
            model="m",
            sent_at=f"2026-12-02T12:00:{i * 0.25:09.6f}+00:00",
            trace_id=trace_id,
        )
        records.append(record)
    # The last two never got a verdict (say, the collector dropped them).
    verdicts = {v.trace_id: v for v in make_verdicts(budget, count)[: count - 2]}
    return join(records, verdicts)


INFO = RunInfo("run-t", "http://127.0.0.1:8080", "m", "2026-12-02T12:00:00+00:00", 15.0, {})
