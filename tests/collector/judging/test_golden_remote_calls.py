"""Golden traces for remote calls and the first token's way back (DESIGN §5 rules 2, 3, 5).

The shapes the real stack has: an HTTP client span that ends when the response headers
arrive while the engine streams on (rule 3b), processes on one host that share a clock
and must never be moved, processes on two hosts whose clocks differ (rule 3a, Jaeger's
adjuster), the first token travelling back through client → gateway → engine (rule 2),
and children that tie on end and start (rule 5). Every expected number is worked out by
hand in the comment above it; times are milliseconds from the trace's start.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import COMPILED, Evaluator
from spanbudget.collector.judging.verdict import Status, Verdict
from spanbudget.collector.spans import SpanKind

from tests.support.traces import TraceBuilder

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
MODEL = "Qwen/Qwen3-8B"
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL}
PATHS = [True, False] if COMPILED else [False]


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(REPO / "budget.yaml").budget


def judge(budget: Budget, builder: TraceBuilder, compiled: bool) -> Verdict:
    spans = builder.spans
    verdict = Evaluator(budget, compiled=compiled).evaluate(spans, evaluated_at=NOW)
    assert verdict is not None
    # The verdict never depends on the order the spans arrive in.
    again = Evaluator(budget, compiled=compiled).evaluate(spans[::-1], evaluated_at=NOW)
    assert again is not None
    assert again.to_dict() == verdict.to_dict()
    return verdict


def engine(
    b: TraceBuilder,
    parent: str,
    start: float,
    end: float,
    *,
    ttft: float,
    queue: float,
    prefill: float,
    host: str | None,
) -> str:
    """vLLM's `llm_request`, its phases in milliseconds as attributes in seconds."""
    return b.add(
        "llm_request",
        start,
        end,
        parent=parent,
        kind=SpanKind.SERVER,
        service="vllm",
        host=host,
        attributes={
            "gen_ai.latency.time_to_first_token": ttft / 1000,
            "gen_ai.latency.time_in_queue": queue / 1000,
            "gen_ai.latency.time_in_model_prefill": prefill / 1000,
        },
    )


def gateway_root(b: TraceBuilder, first_token_ms: float, end: float = 300) -> str:
    return b.add(
        "POST /v1/chat/completions",
        0,
        end,
        kind=SpanKind.SERVER,
        host="node-a",
        attributes={"gen_ai.response.time_to_first_chunk": first_token_ms / 1000},
    )


@pytest.mark.parametrize("compiled", PATHS)
def test_a_streamed_response_outlives_the_client_span_that_waits_on_it(
    budget: Budget, compiled: bool
) -> None:
    # Gateway 0..300 (first chunk written at 150); its LLM call `chat` 10..290 (first
    # chunk received at 145); httpx's `POST` 11..30 ends when the headers arrive, while
    # the engine's llm_request 12..280 streams on (same host). First token at 12 + 120 =
    # 132: prefill 52..132, queue 32..52, frontend 12..32.
    # Rule 3b stretches POST to 280; chat's mark cuts it at 145. The engine is done at
    # 132, so POST keeps 11..12 and the hop back 132..145 (14), chat 10..11 (1); the
    # phases 20 + 20 + 80. Prefill 135 (overrun); the gateway 0..10 and 145..150 (15, warn).
    b = TraceBuilder()
    root = gateway_root(b, 150)
    chat = b.add(
        f"chat {MODEL}",
        10,
        290,
        parent=root,
        kind=SpanKind.CLIENT,
        host="node-a",
        attributes={**CHAT, "gen_ai.response.time_to_first_chunk": 0.135},
    )
    post = b.add("POST", 11, 30, parent=chat, kind=SpanKind.CLIENT, host="node-a")
    engine(b, post, 12, 280, ttft=120, queue=20, prefill=80, host="node-a")
    verdict = judge(budget, b, compiled)
    assert verdict.ttft_ms == 150.0
    assert verdict.skew_adjusted_ms == 0.0
    prefill = verdict.stage("prefill")
    assert (prefill.ms, prefill.status) == (135.0, Status.OVERRUN)
    assert prefill.breakdown == {
        f"chat {MODEL}": 1.0,
        "POST": 14.0,
        "vllm.frontend": 20.0,
        "vllm.queue": 20.0,
        "vllm.prefill": 80.0,
    }
    assert (verdict.stage("gateway").ms, verdict.stage("gateway").status) == (15.0, Status.WARN)
    assert verdict.unattributed_ms == 0.0


def offset_engine(engine_host: str | None) -> TraceBuilder:
    """Gateway 0..200 (first token 150); chat 10..195 (first chunk at 145); the engine's
    llm_request 6..186 starts 4 ms before the call it serves, on `engine_host`."""
    b = TraceBuilder()
    root = gateway_root(b, 150, end=200)
    chat = b.add(
        f"chat {MODEL}",
        10,
        195,
        parent=root,
        kind=SpanKind.CLIENT,
        host="node-a",
        attributes={**CHAT, "gen_ai.response.time_to_first_chunk": 0.135},
    )
    engine(b, chat, 6, 186, ttft=100, queue=10, prefill=60, host=engine_host)
    return b


@pytest.mark.parametrize("compiled", PATHS)
def test_a_child_on_the_same_host_is_never_moved(budget: Budget, compiled: bool) -> None:
    # One host, one clock: the engine's 4 ms head start is real (say, the gateway's clock
    # read after the request left), so nothing moves. llm_request keeps 6..186, is done
    # at 6 + 100 = 106 and is clipped to its parent from 10: frontend 6..36 becomes
    # 10..36 (26), queue 36..46 (10), prefill 46..106 (60); chat 106..145 (39, the hop
    # back). Prefill 135.
    verdict = judge(budget, offset_engine("node-a"), compiled)
    assert verdict.skew_adjusted_ms == 0.0
    assert verdict.stage("prefill").breakdown == {
        f"chat {MODEL}": 39.0,
        "vllm.frontend": 26.0,
        "vllm.queue": 10.0,
        "vllm.prefill": 60.0,
    }
    assert verdict.stage("prefill").ms == 135.0


@pytest.mark.parametrize("compiled", PATHS)
@pytest.mark.parametrize("engine_host", ["node-b", None])
def test_a_child_on_another_host_that_starts_early_is_centred(
    budget: Budget, compiled: bool, engine_host: str | None
) -> None:
    # Another host (node-b; or no host.name at all, when the service names stand in and
    # differ): its clock may be off. llm_request (180 ms) is shorter than chat (185) and
    # starts before it, so it is centred: 10 + (185 − 180) / 2 = 12.5, a 6.5 ms shift.
    # The engine then runs 12.5..192.5, its first token at 112.5: frontend 12.5..42.5
    # (30), queue 10, prefill 60; chat 10..12.5 and 112.5..145 (35). Prefill 135.
    verdict = judge(budget, offset_engine(engine_host), compiled)
    assert verdict.skew_adjusted_ms == 6.5
    assert verdict.stage("prefill").breakdown == {
        f"chat {MODEL}": 35.0,
        "vllm.frontend": 30.0,
        "vllm.queue": 10.0,
        "vllm.prefill": 60.0,
    }
    assert verdict.stage("prefill").ms == 135.0


@pytest.mark.parametrize("compiled", PATHS)
def test_a_longer_child_on_another_host_that_starts_inside_stays(
    budget: Budget, compiled: bool
) -> None:
    # Jaeger's adjuster leaves a child longer than its parent alone when it starts inside
    # it (an async call, or a streamed response): llm_request 20..300 on node-b under chat
    # 10..195 is not moved. It is done at 20 + 100 = 120: frontend 20..50, queue 50..60,
    # prefill 60..120; chat 10..20 and 120..145 (35). Prefill 135, no shift.
    b = TraceBuilder()
    root = gateway_root(b, 150, end=320)
    chat = b.add(
        f"chat {MODEL}",
        10,
        195,
        parent=root,
        kind=SpanKind.CLIENT,
        host="node-a",
        attributes={**CHAT, "gen_ai.response.time_to_first_chunk": 0.135},
    )
    engine(b, chat, 20, 300, ttft=100, queue=10, prefill=60, host="node-b")
    verdict = judge(budget, b, compiled)
    assert verdict.skew_adjusted_ms == 0.0
    assert verdict.stage("prefill").breakdown == {
        f"chat {MODEL}": 35.0,
        "vllm.frontend": 30.0,
        "vllm.queue": 10.0,
        "vllm.prefill": 60.0,
    }


@pytest.mark.parametrize("compiled", PATHS)
def test_the_first_token_travels_back_through_each_hop(budget: Budget, compiled: bool) -> None:
    # The load tester's `chat` 0..400 receives the first chunk at 200; the gateway 10..390
    # writes it at 195; its LLM call 30..380 receives it at 190; httpx's POST 31..50 ends
    # at the headers; the engine 32..370 (one host) emits it at 32 + 150 = 182 (prefill
    # 82..182, queue 62..82, frontend 32..62). Each is done at its own mark:
    #   network: 0..10 in and 195..200 back = 15
    #   gateway: 10..30 and the relay 190..195 = 25 (overrun by 10)
    #   prefill: chat 30..31 (1), POST 31..32 and the hop back 182..190 (9), the engine
    #            30 + 20 + 100 = 150; in all 160 (overrun by 40)
    # The engine's decode (182..370) is after its first token: none of it counts.
    b = TraceBuilder()
    client = b.add(
        f"chat {MODEL}",
        0,
        400,
        kind=SpanKind.CLIENT,
        service="spanbudget-loadtest",
        host="node-a",
        attributes={**CHAT, "gen_ai.response.time_to_first_chunk": 0.2},
    )
    server = b.add(
        "POST /v1/chat/completions",
        10,
        390,
        parent=client,
        kind=SpanKind.SERVER,
        host="node-a",
        attributes={"gen_ai.response.time_to_first_chunk": 0.185},
    )
    chat = b.add(
        f"chat {MODEL}",
        30,
        380,
        parent=server,
        kind=SpanKind.CLIENT,
        host="node-a",
        attributes={**CHAT, "gen_ai.response.time_to_first_chunk": 0.16},
    )
    post = b.add("POST", 31, 50, parent=chat, kind=SpanKind.CLIENT, host="node-a")
    engine(b, post, 32, 370, ttft=150, queue=20, prefill=100, host="node-a")
    verdict = judge(budget, b, compiled)
    assert verdict.ttft_ms == 200.0
    assert {s.name: s.ms for s in verdict.stages} == {
        "network": 15.0,
        "gateway": 25.0,
        "retrieval": 0.0,
        "prompt": 0.0,
        "prefill": 160.0,
    }
    assert verdict.stage("network").breakdown == {f"chat {MODEL}": 15.0}
    assert verdict.stage("gateway").breakdown == {"POST /v1/chat/completions": 25.0}
    assert verdict.stage("prefill").breakdown == {
        f"chat {MODEL}": 1.0,
        "POST": 9.0,
        "vllm.frontend": 30.0,
        "vllm.queue": 20.0,
        "vllm.prefill": 100.0,
    }
    assert verdict.blame == ("prefill", "gateway")
    assert (verdict.status, verdict.total_status) == (Status.OVERRUN, Status.WARN)
    assert verdict.skew_adjusted_ms == 0.0


@pytest.mark.parametrize("compiled", PATHS)
def test_children_that_start_and_end_together_go_to_the_lowest_span_id(
    budget: Budget, compiled: bool
) -> None:
    # Retrieval and prompt both run 10..50 under the gateway (0..100, first token at 100):
    # equal ends, equal starts, so the lower span id takes 10..50, whichever arrives
    # first (`judge` also tries the spans reversed). Here retrieval is added second and
    # gets the higher id: prompt 40, retrieval 0, the gateway 0..10 and 50..100 (60).
    b = TraceBuilder()
    root = gateway_root(b, 100, end=100)
    b.add("prompt.render", 10, 50, parent=root, host="node-a")
    b.add(
        "retrieval rag-docs",
        10,
        50,
        parent=root,
        host="node-a",
        attributes={"gen_ai.operation.name": "retrieval"},
    )
    verdict = judge(budget, b, compiled)
    assert {s.name: s.ms for s in verdict.stages if s.ms is not None} == {
        "gateway": 60.0,
        "retrieval": 0.0,
        "prompt": 40.0,
        "prefill": 0.0,
    }
