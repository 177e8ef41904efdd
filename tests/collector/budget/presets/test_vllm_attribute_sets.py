"""vLLM's `llm_request` as each release line sets it (issue 18's notes, §5), judged with the
`vllm` and `vllm-v0` presets: traced alone (the span is the root) and under a client span.

V0 (0.5.1-0.10.1): time_in_queue from arrival to first scheduled, time_to_first_token,
e2e; 0.5.5 on, with --collect-detailed-traces, time_in_scheduler/forward/execute (totals
over the request, in seconds). V1 (0.10.2 on): also time_in_model_prefill, decode and
inference; the time from arrival to queued is the frontend.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from spanbudget.collector.budget.loader import load_preset
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Status, Verdict
from spanbudget.collector.spans import AttrValue, SpanKind

from tests.support.traces import TraceBuilder

NOW = datetime(2026, 12, 2, tzinfo=UTC)
# A request: arrives at 0, first token at 80 ms (queue 30, prefill 40), done at 300 ms.
V0_5_1: dict[str, AttrValue] = {
    "gen_ai.response.model": "Qwen/Qwen3-8B",
    "gen_ai.request.id": "cmpl-1",
    "gen_ai.request.temperature": 0.7,
    "gen_ai.request.top_p": 1.0,
    "gen_ai.request.max_tokens": 64,
    "gen_ai.request.best_of": 1,
    "gen_ai.request.n": 1,
    "gen_ai.usage.num_sequences": 1,
    "gen_ai.usage.prompt_tokens": 512,
    "gen_ai.usage.completion_tokens": 64,
    "gen_ai.latency.time_in_queue": 0.030,
    "gen_ai.latency.time_to_first_token": 0.080,
    "gen_ai.latency.e2e": 0.300,
}
V0_DETAILED = {
    **{k: v for k, v in V0_5_1.items() if k != "gen_ai.request.best_of"},
    "gen_ai.latency.time_in_scheduler": 0.004,
    "gen_ai.latency.time_in_model_forward": 0.210,
    "gen_ai.latency.time_in_model_execute": 0.230,
}
V1: dict[str, AttrValue] = {
    "gen_ai.latency.time_to_first_token": 0.080,
    "gen_ai.latency.e2e": 0.300,
    "gen_ai.latency.time_in_queue": 0.030,
    "gen_ai.latency.time_in_model_prefill": 0.040,
    "gen_ai.latency.time_in_model_decode": 0.220,
    "gen_ai.latency.time_in_model_inference": 0.260,
    "gen_ai.usage.prompt_tokens": 512,
    "gen_ai.usage.completion_tokens": 64,
    "gen_ai.request.id": "cmpl-1",
    "gen_ai.request.max_tokens": 64,
}


def judge(preset: str, attributes: dict[str, AttrValue], *, caller: bool) -> Verdict:
    b = TraceBuilder()
    parent = None
    offset = 0.0
    if caller:  # a client that passed the context, sending 5 ms before vLLM got it
        parent = b.add("chat m", 0, 310, kind=SpanKind.CLIENT, service="app")
        offset = 5.0
    b.add("llm_request", offset, offset + 300, parent=parent, kind=SpanKind.SERVER,
          service="vllm", attributes=attributes)  # fmt: skip
    verdict = Evaluator(load_preset(preset).budget).evaluate(b.spans, evaluated_at=NOW)
    assert verdict is not None
    assert verdict.status is not Status.INCOMPLETE
    parts = [s.ms for s in verdict.stages if s.ms is not None]
    assert round(sum(parts) + verdict.unattributed_ms, 2) == verdict.ttft_ms
    return verdict


def ms(verdict: Verdict) -> dict[str, float | None]:
    return {s.name: s.ms for s in verdict.stages}


@pytest.mark.parametrize("attributes", [V0_5_1, V0_DETAILED], ids=["0.5.1", "0.5.5-0.10.1"])
@pytest.mark.parametrize("caller", [False, True], ids=["alone", "under-a-client"])
def test_v0_queue_runs_from_arrival_and_prefill_to_the_first_token(
    attributes: dict[str, AttrValue], caller: bool
) -> None:
    verdict = judge("vllm-v0", attributes, caller=caller)
    assert verdict.ttft_ms == (85.0 if caller else 80.0)
    assert ms(verdict) == {"queue": 30.0, "prefill": 50.0, "caller": 5.0 if caller else 0.0}
    assert verdict.stage("queue").breakdown == {"vllm.queue": 30.0}
    assert verdict.stage("prefill").breakdown == {"vllm.prefill": 50.0}


@pytest.mark.parametrize("caller", [False, True], ids=["alone", "under-a-client"])
def test_v1_frontend_queue_and_prefill(caller: bool) -> None:
    verdict = judge("vllm", V1, caller=caller)
    assert verdict.ttft_ms == (85.0 if caller else 80.0)
    assert ms(verdict) == {
        "frontend": 10.0,
        "queue": 30.0,
        "prefill": 40.0,
        "caller": 5.0 if caller else 0.0,
    }


def test_v0_spans_under_the_v1_preset_have_no_frontend() -> None:
    verdict = judge("vllm", V0_5_1, caller=False)
    assert verdict.stage("frontend").status is Status.ABSENT
    assert ms(verdict) == {"frontend": 0.0, "queue": 30.0, "prefill": 50.0, "caller": 0.0}
