"""Golden traces: the reference path in the situations a budget must tell apart.

Every expected number below is computed by hand from the layout of
`tests.support.traces.rag_trace` (base: network 6, gateway 10, retrieval 18,
prompt 8, prefill 98, TTFT 140 ms). The first token's marks: engine 137, the gateway's
LLM client 138, the gateway's server span 139, the caller 140; each span is done at its
own mark (DESIGN §5 rule 2), so the way back is network 139..140, the gateway's relay
138..139 and the POST hop from the engine 137..138.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Status, Verdict
from spanbudget.collector.spans import SpanKind

from tests.support.traces import TraceBuilder, rag_trace

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(REPO / "budget.yaml").budget


def judge(budget: Budget, builder: TraceBuilder) -> Verdict:
    verdict = Evaluator(budget).evaluate(builder.spans, evaluated_at=NOW)
    assert verdict is not None
    return verdict


def stage_ms(verdict: Verdict) -> dict[str, float | None]:
    return {s.name: s.ms for s in verdict.stages}


def stage_status(verdict: Verdict) -> dict[str, str]:
    return {s.name: s.status.value for s in verdict.stages}


def test_everything_within_targets(budget: Budget) -> None:
    verdict = judge(budget, rag_trace())
    assert verdict.to_dict() == {
        "trace_id": "5b8aa5a2d2c872e8321cf37308d69df2",
        "budget": "rag-ttft",
        "status": "ok",
        "ttft_ms": 140.0,
        "total": {"target_ms": 170.0, "limit_ms": 250.0, "status": "ok"},
        "stages": [
            {
                "name": "network",
                "ms": 6.0,
                "target_ms": 30.0,
                "limit_ms": 50.0,
                "status": "ok",
                "breakdown": {"chat qwen2.5-7b": 6.0},
            },
            {
                "name": "gateway",
                "ms": 10.0,
                "target_ms": 10.0,
                "limit_ms": 15.0,
                "status": "ok",
                "breakdown": {
                    "POST /v1/chat/completions": 7.0,
                    "auth.verify": 2.0,
                    "gateway.validate": 1.0,
                },
            },
            {
                "name": "retrieval",
                "ms": 18.0,
                "target_ms": 20.0,
                "limit_ms": 40.0,
                "status": "ok",
                "breakdown": {
                    "retrieval rag-docs": 1.0,
                    "query rag-docs": 3.0,
                    "embeddings all-MiniLM-L6-v2": 14.0,
                },
            },
            {
                "name": "prompt",
                "ms": 8.0,
                "target_ms": 10.0,
                "limit_ms": 20.0,
                "status": "ok",
                "breakdown": {"prompt.render": 8.0},
            },
            {
                "name": "prefill",
                "ms": 98.0,
                "target_ms": 100.0,
                "limit_ms": 120.0,
                "status": "ok",
                "breakdown": {
                    "chat qwen2.5-7b": 1.0,
                    "POST": 2.0,
                    "vllm.prefill": 70.0,
                    "vllm.queue": 10.0,
                    "vllm.frontend": 15.0,
                },
            },
        ],
        "unattributed_ms": 0.0,
        "blame": [],
        "overrun_ms": 0.0,
        "skew_adjusted_ms": 0.0,
        "attributes": {
            "loadtest.run_id": "run-1",
            "loadtest.request_index": 7,
            # The LLM call's: the caller's span names the model, the engine's counts the
            # prompt's tokens.
            "gen_ai.request.model": "qwen2.5-7b",
            "gen_ai.usage.input_tokens": 512,
        },
        "evaluated_at": "2026-12-02T12:00:00.000+00:00",
        # The caller's own mark, the outermost.
        "first_token": {
            "source": "attribute",
            "mark": "attribute gen_ai.response.time_to_first_chunk (seconds after the span's"
            " start)",
            "span": "chat qwen2.5-7b",
            "exact": True,
        },
    }


@pytest.mark.parametrize(
    ("extra", "stage", "ms", "ttft", "total_status"),
    [
        ({"network": 50}, "network", 56.0, 190.0, "warn"),
        ({"gateway": 10}, "gateway", 20.0, 150.0, "ok"),
        ({"retrieval": 30}, "retrieval", 48.0, 170.0, "ok"),
        ({"prompt": 15}, "prompt", 23.0, 155.0, "ok"),
        ({"prefill": 25}, "prefill", 123.0, 165.0, "ok"),
        ({"queue": 30}, "prefill", 128.0, 170.0, "ok"),
    ],
)
def test_each_stage_over_its_limit(
    budget: Budget,
    extra: dict[str, float],
    stage: str,
    ms: float,
    ttft: float,
    total_status: str,
) -> None:
    verdict = judge(budget, rag_trace(**extra))
    assert verdict.status is Status.OVERRUN
    assert verdict.ttft_ms == ttft
    assert verdict.total_status.value == total_status
    assert stage_ms(verdict)[stage] == ms
    assert stage_status(verdict)[stage] == "overrun"
    others = {name: s for name, s in stage_status(verdict).items() if name != stage}
    assert set(others.values()) == {"ok"}
    assert verdict.blame == (stage,)
    assert verdict.overrun_ms == 0.0


def test_blame_orders_by_excess_over_limit(budget: Budget) -> None:
    # retrieval 48 (8 over its 40), prefill 123 (3 over its 120)
    verdict = judge(budget, rag_trace(retrieval=30, prefill=25))
    assert verdict.blame == ("retrieval", "prefill")
    assert verdict.ttft_ms == 195.0
    assert verdict.total_status is Status.WARN


def test_total_over_limit_with_no_stage_over(budget: Budget) -> None:
    # An internal root from a browser front end: no stage, so its 26 ms (25 in, 1 back)
    # are unattributed, and no client root, so network is unmeasured and the total limit
    # is 250 - 50 = 200.
    builder = rag_trace(
        network=20,
        gateway=5,
        retrieval=20,
        prompt=10,
        prefill=18,
        root_kind=SpanKind.INTERNAL,
        root_service="web-frontend",
    )
    verdict = judge(budget, builder)
    assert stage_ms(verdict) == {
        "network": None,
        "gateway": 15.0,
        "retrieval": 38.0,
        "prompt": 18.0,
        "prefill": 116.0,
    }
    assert set(stage_status(verdict).values()) == {"warn", "unmeasured"}
    assert verdict.unattributed_ms == 26.0
    assert verdict.ttft_ms == 213.0
    assert (verdict.total_target_ms, verdict.total_limit_ms) == (140.0, 200.0)
    assert verdict.total_status is Status.OVERRUN
    assert verdict.status is Status.OVERRUN
    assert verdict.overrun_ms == 13.0
    # Over target by: retrieval 18, prefill 16, prompt 8, gateway 5.
    assert verdict.blame == ("retrieval", "prefill", "prompt", "gateway")


def test_embedding_and_search_in_parallel(budget: Budget) -> None:
    b = TraceBuilder()
    root = b.add(
        "POST /v1/chat/completions",
        0,
        200,
        kind=SpanKind.SERVER,
        attributes={"gen_ai.response.time_to_first_chunk": 0.1},
    )
    retrieval = b.add(
        "retrieval rag-docs", 10, 45, parent=root, attributes={"gen_ai.operation.name": "retrieval"}
    )
    b.add(
        "embeddings m", 10, 35, parent=retrieval, attributes={"gen_ai.operation.name": "embeddings"}
    )
    b.add("query rag-docs", 12, 44, parent=retrieval, attributes={"db.system.name": "qdrant"})
    verdict = judge(budget, b)
    # Walking back from 45: query finished last (44) and covers 12..44; embeddings ends
    # at 35, after the cursor (12), so it is off the critical path.
    retrieval_result = verdict.stage("retrieval")
    assert retrieval_result.ms == 35.0
    assert retrieval_result.breakdown == {"retrieval rag-docs": 3.0, "query rag-docs": 32.0}
    assert verdict.stage("gateway").ms == 65.0  # 0..10 and 45..100
    assert verdict.ttft_ms == 100.0


def test_spans_after_the_first_token_do_not_count(budget: Budget) -> None:
    base = judge(budget, rag_trace())
    builder = rag_trace()
    server = builder.spans[1].span_id
    builder.add("stream.forward", 150, 380, parent=server)
    builder.add(
        "embeddings cache-warm",
        160,
        190,
        parent=server,
        attributes={"gen_ai.operation.name": "embeddings"},
    )
    verdict = judge(budget, builder)
    assert verdict.ttft_ms == 140.0
    assert stage_ms(verdict) == stage_ms(base)
    assert "embeddings cache-warm" not in verdict.stage("retrieval").breakdown


def test_retrieval_absent(budget: Budget) -> None:
    builder = rag_trace()
    builder.spans = [
        s for s in builder.spans if "rag-docs" not in s.name and "MiniLM" not in s.name
    ]
    verdict = judge(budget, builder)
    retrieval = verdict.stage("retrieval")
    assert (retrieval.ms, retrieval.status) == (0.0, Status.ABSENT)
    # The 18 ms where retrieval used to run are now the gateway server span's own time.
    assert verdict.stage("gateway").ms == 28.0
    assert verdict.status is Status.OVERRUN
    assert verdict.blame == ("gateway",)
    assert verdict.ttft_ms == 140.0


@pytest.mark.parametrize("client_root", [True, False])
def test_error_span_fails_the_trace(budget: Budget, client_root: bool) -> None:
    # The chat span failed after streaming began: a broken stream is a failed request.
    # The span started before the first token, so it is on the critical path, with or
    # without the caller's span around the server's (then the first token is the
    # server's, at 139 ms, 134 ms after it started).
    verdict = judge(budget, rag_trace(chat_error=True, client_root=client_root))
    assert verdict.status is Status.ERROR
    assert verdict.total_status is Status.OK
    assert verdict.ttft_ms == (140.0 if client_root else 134.0)


def test_no_first_token_is_incomplete(budget: Budget) -> None:
    verdict = judge(budget, rag_trace(marks=False))
    assert verdict.status is Status.INCOMPLETE
    assert verdict.ttft_ms is None
    assert verdict.total_status is Status.INCOMPLETE
    # The window is the whole root span, 0..400 ms; llm_request is not expanded.
    assert stage_ms(verdict) == {
        "network": 12.0,
        "gateway": 10.0,
        "retrieval": 18.0,
        "prompt": 8.0,
        "prefill": 352.0,
    }
    assert verdict.to_dict()["ttft_ms"] is None


def test_server_only_trace_is_judged_on_200(budget: Budget) -> None:
    verdict = judge(budget, rag_trace(client_root=False, prefill=70))
    # TTFT runs from the server span's start (5 ms) to its own first token (209 ms).
    assert verdict.ttft_ms == 204.0
    assert verdict.stage("network").status is Status.UNMEASURED
    assert verdict.stage("network").ms is None
    assert (verdict.total_target_ms, verdict.total_limit_ms) == (140.0, 200.0)
    assert verdict.total_status is Status.OVERRUN
    assert verdict.overrun_ms == 4.0
    assert verdict.blame == ("prefill",)


def test_remote_child_skewed_by_40ms(budget: Budget) -> None:
    verdict = judge(budget, rag_trace(vllm_skew_ms=40))
    # llm_request (42..390) runs 40 ms late by the engine's clock, 82..430, and spills
    # out of its parent (POST, 41..391). The engine is another host (no host.name: the
    # service names stand in) and the span is 2 ms shorter, so it is centred at 42 ms:
    # the 40 ms shift undoes the skew, and the breakdown is the unskewed one.
    assert verdict.skew_adjusted_ms == 40.0
    assert verdict.ttft_ms == 140.0
    prefill = verdict.stage("prefill")
    assert prefill.ms == 98.0
    assert prefill.breakdown == {
        "chat qwen2.5-7b": 1.0,
        "POST": 2.0,
        "vllm.prefill": 70.0,
        "vllm.queue": 10.0,
        "vllm.frontend": 15.0,
    }


def test_vllm_request_with_queue_and_prefill(budget: Budget) -> None:
    verdict = judge(budget, rag_trace(queue=40, prefill=10))
    prefill = verdict.stage("prefill")
    assert prefill.breakdown["vllm.queue"] == 50.0
    assert prefill.breakdown["vllm.prefill"] == 80.0
    assert prefill.ms == 148.0
    assert verdict.blame == ("prefill",)
    assert verdict.ttft_ms == 190.0


def test_vllm_phases_that_do_not_fit_are_clamped(budget: Budget) -> None:
    b = TraceBuilder()
    chat = b.add(
        "chat m",
        0,
        300,
        kind=SpanKind.CLIENT,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.response.time_to_first_chunk": 0.1},
    )
    b.add(
        "llm_request",
        10,
        300,
        parent=chat,
        kind=SpanKind.SERVER,
        service="vllm",
        attributes={
            "gen_ai.latency.time_to_first_token": 0.08,  # first token at 90
            "gen_ai.latency.time_in_model_prefill": 0.05,  # 40..90
            "gen_ai.latency.time_in_queue": 0.5,  # clamped to 10..40
        },
    )
    verdict = judge(budget, b)
    breakdown = verdict.stage("network").breakdown  # the client root claims network
    assert breakdown["vllm.prefill"] == 50.0
    assert breakdown["vllm.queue"] == 30.0
    assert "vllm.frontend" not in breakdown
    # The engine is done at its first token (90): 90..100 is the way back, the client's.
    assert "vllm.decode" not in breakdown
    assert breakdown["chat m"] == 20.0


def test_trace_matching_no_stage_is_skipped(budget: Budget) -> None:
    b = TraceBuilder()
    root = b.add("GET /healthz", 0, 2, kind=SpanKind.SERVER, service="other-service")
    b.add("db.ping", 0.5, 1, parent=root)
    assert Evaluator(budget).evaluate(b.spans, evaluated_at=NOW) is None
    startup = TraceBuilder()
    startup.add("Load weights", 0, 9000, service="vllm")
    assert Evaluator(budget).evaluate(startup.spans, evaluated_at=NOW) is None


def test_duplicate_spans_count_once(budget: Budget) -> None:
    builder = rag_trace()
    builder.spans = builder.spans + builder.spans[2:6]
    assert judge(budget, builder).to_dict() == judge(budget, rag_trace()).to_dict()


def test_orphans_hang_under_the_root(budget: Budget) -> None:
    builder = rag_trace()
    # The gateway's prompt span lost its parent (say, a dropped batch).
    builder.spans = [
        s
        if s.name != "prompt.render"
        else type(s)(**{**_fields(s), "parent_span_id": "ffffffffffffffff"})
        for s in builder.spans
    ]
    verdict = judge(budget, builder)
    # Under the root it competes with the gateway's server span, which finished later and
    # covers it: the critical path goes through the server span, whose own time now
    # includes 28..40 (18 ms of gateway in all). Every instant still counts once.
    assert verdict.stage("prompt").ms == 0.0
    assert verdict.stage("prompt").status is Status.OK
    assert verdict.stage("gateway").ms == 18.0
    assert verdict.ttft_ms == 140.0
    assert sum(s.ms or 0 for s in verdict.stages) + verdict.unattributed_ms == 140.0


def _fields(span: object) -> dict[str, object]:
    return {name: getattr(span, name) for name in span.__slots__}  # type: ignore[attr-defined]
