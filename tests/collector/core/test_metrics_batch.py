"""Observing a step's verdicts at once exposes exactly what observing them one by one does:
the same counts, sums and buckets, and the same exemplar (the last trace) on each bucket."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.core.metrics import CollectorMetrics
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict

from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 2, tzinfo=UTC)


def verdicts() -> list[Verdict]:
    evaluator = Evaluator(load_budget(REPO / "budget.yaml").budget)
    out = []
    for i in range(80):
        builder = rag_trace(
            trace_id=f"{i:032x}", retrieval=(i * 7) % 45, prefill=(i * 13) % 60, queue=i % 4
        )
        verdict = evaluator.evaluate(builder.spans, evaluated_at=NOW)
        assert verdict is not None
        out.append(verdict)
    return out


def exposition(metrics: CollectorMetrics) -> str:
    text: str = generate_latest(metrics.registry).decode()
    # Creation times and exemplar timestamps are the wall clock; the rest must agree.
    text = "".join(line for line in text.splitlines(True) if "_created" not in line)
    return re.sub(r"(# \{trace_id=\"[0-9a-f]+\"\} [0-9.e+-]+) [0-9.]+", r"\1", text)


def test_a_batch_exposes_what_one_by_one_does() -> None:
    judged = verdicts()
    assert len({v.status for v in judged}) > 1
    one_by_one = CollectorMetrics(CollectorRegistry())
    for verdict in judged:
        one_by_one.observe(verdict)
    batched = CollectorMetrics(CollectorRegistry())
    batched.observe_all(judged[:30])
    batched.observe_all(judged[30:])
    expected = exposition(one_by_one)
    assert "trace_id=" in expected
    assert "spanbudget_stage_overruns_total" in expected
    assert exposition(batched) == expected
