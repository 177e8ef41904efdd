"""Requests of the reference path with seeded jitter per stage, as traces and as verdicts:
two sides drawn alike differ only by chance; `slow_retrieval` adds ms to every retrieval."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.spans import Span

from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
BUDGET_PATH = REPO / "budget.yaml"


@pytest.fixture(scope="session")
def budget() -> Budget:
    return load_budget(BUDGET_PATH).budget


def traces(
    count: int, seed: int, *, slow_retrieval: float = 0.0, run_id: str = "run-1", first: int = 0
) -> list[Span]:
    """`count` requests' spans; trace ids from `first` + 1, `loadtest.run_id` = `run_id`."""
    rng = random.Random(seed)
    spans: list[Span] = []
    for i in range(count):
        trace = rag_trace(
            trace_id=f"{first + i + 1:032x}",
            network=rng.uniform(0, 4),
            gateway=rng.uniform(0, 2),
            retrieval=rng.uniform(0, 10) + slow_retrieval,
            prompt=rng.uniform(0, 3),
            queue=rng.uniform(0, 20),
            prefill=rng.uniform(0, 25),
        ).spans
        for span in trace:
            if "loadtest.run_id" in span.attributes:
                span = replace(span, attributes={**span.attributes, "loadtest.run_id": run_id})
            spans.append(span)
    return spans


def verdicts(budget: Budget, spans: list[Span]) -> list[Verdict]:
    evaluator = Evaluator(budget)
    by_trace: dict[str, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    out = []
    for trace in by_trace.values():
        verdict = evaluator.evaluate(trace, evaluated_at=datetime.now(UTC))
        assert verdict is not None
        out.append(verdict)
    return out
