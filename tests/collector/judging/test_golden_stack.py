"""Two traces the real embedded stack produced (tests/fixtures/stack/), judged by hand.

All processes ran on one host (`host.name` vm), so nothing is shifted for clock skew.
httpx's `POST` span ends when the engine's response headers arrive while the engine's
`llm_request` streams on: rule 3b stretches `POST` to the end of the stream, and every
span is done at its own first-token mark (rule 2). Times below are milliseconds from the
trace's first span, rounded to the microsecond as the comments write them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import COMPILED, Evaluator
from spanbudget.collector.judging.verdict import Status, Verdict
from spanbudget.collector.readers import parse_traces

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "stack"
BUDGET = load_budget(REPO / "budget.yaml").budget
NOW = datetime(2026, 12, 4, tzinfo=UTC)
CHAT = "chat Qwen/Qwen3-8B"


def judge(name: str, compiled: bool) -> Verdict:
    path = FIXTURES / name
    spans = parse_traces(path.read_bytes(), path.name)
    assert {span.host for span in spans} == {"vm"}
    verdict = Evaluator(BUDGET, compiled=compiled).evaluate(spans, evaluated_at=NOW)
    assert verdict is not None
    return verdict


def approx(values: dict[str, float]) -> dict[str, object]:
    # The verdict gives each part in whole 0.01 ms, apportioned so that they add up to the
    # rounded TTFT: each within 0.01 of the exact value.
    return {key: pytest.approx(value, abs=0.0101) for key, value in values.items()}


@pytest.mark.parametrize("compiled", [True, False] if COMPILED else [False])
def test_a_load_test_request(compiled: bool) -> None:
    # The load tester's span 0..415.161 sees the first chunk at 52.587: TTFT 52.59. The
    # gateway (2.901..) writes it at 2.901 + 48.961 = 51.862; its LLM call (13.754..)
    # receives it at 13.754 + 38.066 = 51.820; the engine (17.063..412.667) emits it at
    # 17.063 + 33.804 = 50.867, after a prefill of 31.242 (19.625..) and a queue of 0.052
    # (19.573..): its frontend is 17.063..19.573, 2.510.
    #   network:  0..2.901 in, 51.862..52.587 back = 3.626
    #   gateway:  its own 0.380 + 0.056 + 0.058 + 0.121 + 0.212 and the relay
    #             51.820..51.862 (0.042) = 0.869; validate 0.163; auth 0.056: 1.088
    #   retrieval: 3.614..11.749 = 8.135; prompt 11.870..13.542 = 1.672
    #   prefill:  chat 13.754..14.577 (0.823); POST, stretched to the stream's end and
    #             cut at chat's mark, 14.577..17.063 and 50.867..51.820 (3.439); the
    #             engine 2.510 + 0.052 + 31.242: 38.066
    verdict = judge("with-load-test-client.json", compiled)
    assert verdict.ttft_ms == 52.59
    assert verdict.skew_adjusted_ms == 0.0
    assert verdict.status is Status.OK
    ms = {s.name: s.ms for s in verdict.stages}
    assert ms == approx(
        {"network": 3.626, "gateway": 1.088, "retrieval": 8.135, "prompt": 1.672, "prefill": 38.066}
    )
    assert verdict.stage("network").breakdown == approx({CHAT: 3.626})
    assert verdict.stage("gateway").breakdown == approx(
        {"POST /v1/chat/completions": 0.869, "gateway.validate": 0.163, "auth.verify": 0.056}
    )
    assert verdict.stage("prefill").breakdown == approx(
        {
            CHAT: 0.823,
            "POST": 3.439,
            "vllm.frontend": 2.510,
            "vllm.queue": 0.052,
            "vllm.prefill": 31.242,
        }
    )
    assert verdict.unattributed_ms == 0.0


@pytest.mark.parametrize("compiled", [True, False] if COMPILED else [False])
def test_a_request_with_no_caller_span(compiled: bool) -> None:
    # The gateway's span is the root, 0..167.219, its first chunk written at 49.130: TTFT
    # 49.13, judged on 250 − 50 = 200 ms with network unmeasured. Its LLM call (13.824..)
    # receives the first chunk at 49.050; the engine (17.692..) emits it at 48.236 after a
    # prefill of 28.435 and a queue of 0.060: frontend 17.692..19.741, 2.049.
    #   gateway:  0.475 + 0.078 + 0.074 + 0.131 + 0.252 and the relay 0.080 = 1.090;
    #             validate 0.200; auth 0.061: 1.351
    #   retrieval 0.888..12.425 = 11.537; prompt 12.556..13.572 = 1.016
    #   prefill:  chat 0.785; POST 14.609..17.692 and 48.236..49.050 (3.897); the engine
    #             2.049 + 0.060 + 28.435: 35.226
    verdict = judge("gateway-only.json", compiled)
    assert verdict.ttft_ms == 49.13
    assert (verdict.total_target_ms, verdict.total_limit_ms) == (140.0, 200.0)
    assert verdict.stage("network").status is Status.UNMEASURED
    ms = {s.name: s.ms for s in verdict.stages if s.ms is not None}
    assert ms == approx({"gateway": 1.351, "retrieval": 11.537, "prompt": 1.016, "prefill": 35.226})
    assert verdict.stage("prefill").breakdown == approx(
        {
            CHAT: 0.785,
            "POST": 3.897,
            "vllm.frontend": 2.049,
            "vllm.queue": 0.060,
            "vllm.prefill": 28.435,
        }
    )
    assert verdict.skew_adjusted_ms == 0.0
