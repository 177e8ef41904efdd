"""vLLM's per-phase spans (`vllm_queue`, `vllm_prefill`, `vllm_async_kv_transfer`,
`vllm_decode` under `llm_request`): where a request has them they are its phases, so a KV
transfer shorter than the prefill before it still gets its own time; without them the
phases are read from `llm_request`'s latency attributes, as before."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import COMPILED, Evaluator
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.spans import Span, SpanKind

from tests.support.traces import TraceBuilder

REPO = Path(__file__).resolve().parents[3]
DISAGGREGATED = load_budget(REPO / "examples" / "disaggregated-budget.yaml").budget
NOW = datetime(2026, 12, 6, tzinfo=UTC)


def engine_trace(*, phase_spans: bool, transfer_ms: float = 6.0) -> list[Span]:
    """gateway 0..300 → chat 2..300 → llm_request 20..300, the first token at 160 ms:
    frontend 20..25, queue 25..35, prefill 35..160 - transfer, the transfer up to 160."""
    b = TraceBuilder()
    gateway = b.add("POST /v1/chat/completions", 0, 300, kind=SpanKind.SERVER)
    chat = b.add(
        "chat m",
        2,
        300,
        parent=gateway,
        kind=SpanKind.CLIENT,
        attributes={"gen_ai.operation.name": "chat"},
    )
    first_token = 160.0
    prefill_end = first_token - transfer_ms
    request = b.add(
        "llm_request",
        20,
        300,
        parent=chat,
        kind=SpanKind.SERVER,
        service="vllm",
        attributes={
            "gen_ai.latency.time_to_first_token": (first_token - 20) / 1000,
            "gen_ai.latency.time_in_queue": 0.010,
            "gen_ai.latency.time_in_model_prefill": (first_token - 35) / 1000,
        },
    )
    if phase_spans:
        for name, start, end in (
            ("vllm_queue", 25, 35),
            ("vllm_prefill", 35, prefill_end),
            ("vllm_async_kv_transfer", prefill_end, first_token),
            ("vllm_decode", first_token, 300),
        ):
            b.add(name, start, end, parent=request, service="vllm")
    return b.spans


@pytest.fixture(
    params=[False, True] if COMPILED else [False], ids=lambda c: "compiled" if c else "tree"
)
def evaluator(request: pytest.FixtureRequest) -> Evaluator:
    return Evaluator(DISAGGREGATED, compiled=request.param)


def stages(verdict: Verdict | None) -> dict[str, float | None]:
    assert verdict is not None
    return {s.name: s.ms for s in verdict.stages}


def test_a_short_kv_transfer_gets_its_own_time(evaluator: Evaluator) -> None:
    verdict = evaluator.evaluate(engine_trace(phase_spans=True), evaluated_at=NOW)
    assert verdict is not None
    assert verdict.ttft_ms == 160.0
    ms = stages(verdict)
    assert ms["kv_transfer"] == 6.0  # shorter than the prefill beside it, still its own
    assert ms["prefill"] == 152.0  # the call, the frontend, the queue and the prefill
    prefill = next(s for s in verdict.stages if s.name == "prefill")
    assert set(prefill.breakdown) >= {"vllm_queue", "vllm_prefill", "llm_request"}


def test_a_slowed_kv_transfer_takes_the_blame(evaluator: Evaluator) -> None:
    verdict = evaluator.evaluate(engine_trace(phase_spans=True, transfer_ms=40), evaluated_at=NOW)
    assert stages(verdict)["kv_transfer"] == 40.0
    assert verdict is not None
    assert verdict.blame[0] == "kv_transfer"


def test_without_phase_spans_the_attributes_give_the_phases(evaluator: Evaluator) -> None:
    verdict = evaluator.evaluate(engine_trace(phase_spans=False), evaluated_at=NOW)
    ms = stages(verdict)
    assert ms["kv_transfer"] == 0.0  # absent: no span of the stage
    assert ms["prefill"] == 158.0
    prefill = next(s for s in (verdict.stages if verdict else ()) if s.name == "prefill")
    assert {"vllm.queue", "vllm.prefill"} <= set(prefill.breakdown)
