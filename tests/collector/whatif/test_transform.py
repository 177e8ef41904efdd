"""The what-if rule on golden traces (DESIGN §5; collector/whatif/transform.py states it):
the reference RAG trace (tests/support/traces.rag_trace, judged by hand in the judging
tests: network 6, gateway 10, retrieval 18, prompt 8, prefill 98, TTFT 140), the two
traces of the real stack (tests/fixtures/stack) and small hand-made trees. Every changed
trace is judged again on every evaluator path this install has."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.readers import parse_traces
from spanbudget.collector.spans import Span, SpanKind
from spanbudget.collector.whatif import Pair, change_trace, parse_changes

from tests.support.judging import BUDGET, NOW, paths
from tests.support.traces import TraceBuilder, rag_trace

REPO = Path(__file__).resolve().parents[3]
STACK = REPO / "tests" / "fixtures" / "stack"
RETRIEVAL = {"gen_ai.operation.name": "retrieval"}
EVALUATORS = paths(BUDGET)
IDS = [f"compiled={e.compiled}" for e in EVALUATORS]


def stack_trace(name: str) -> list[Span]:
    path = STACK / name
    return parse_traces(path.read_bytes(), path.name)


def change(evaluator: Evaluator, spans: list[Span], *specs: str) -> Pair:
    result = change_trace(
        evaluator, spans, parse_changes(specs, BUDGET.stage_names()), evaluated_at=NOW
    )
    assert result is not None
    return result[0]


def ms(verdict: Verdict) -> dict[str, float | None]:
    return {s.name: s.ms for s in verdict.stages}


@pytest.mark.parametrize("evaluator", EVALUATORS, ids=IDS)
@pytest.mark.parametrize("spec", ["prefill=x1.0", "retrieval=+0ms", "gateway=x1", "network=-0ms"])
@pytest.mark.parametrize(
    "spans",
    [
        rag_trace().spans,
        stack_trace("with-load-test-client.json"),
        stack_trace("gateway-only.json"),
    ],
    ids=["rag", "stack-client", "stack-gateway"],
)
def test_no_change_is_the_identity(evaluator: Evaluator, spec: str, spans: list[Span]) -> None:
    pair = change(evaluator, spans, spec)
    assert pair.after == pair.before


@pytest.mark.parametrize("evaluator", EVALUATORS, ids=IDS)
def test_a_scale_of_one_moves_no_span(evaluator: Evaluator) -> None:
    # x1 on every stage at once: the spans themselves come back as they were, so the
    # verdict is the same by construction, not by luck of rounding.
    from spanbudget.collector.whatif import retime

    spans = stack_trace("with-load-test-client.json")
    judged = evaluator.judge(spans, evaluated_at=NOW)
    assert judged is not None
    factor_of = dict.fromkeys(judged.span_stages, 1.0)
    assert retime(spans, judged.root_span_id, factor_of, BUDGET.first_token) == spans


@pytest.mark.parametrize("evaluator", EVALUATORS, ids=IDS)
@pytest.mark.parametrize(
    ("spec", "stage", "before_ms", "after_ms"),
    [
        ("retrieval=-8ms", "retrieval", 18.0, 10.0),
        ("prompt=-8ms", "prompt", 8.0, 0.0),
        ("gateway=-4ms", "gateway", 10.0, 6.0),
        ("network=-3ms", "network", 6.0, 3.0),
        ("prefill=x0.5", "prefill", 98.0, 49.0),
        ("prefill=-40ms", "prefill", 98.0, 58.0),
        ("retrieval=+30ms", "retrieval", 18.0, 48.0),
    ],
)
def test_a_stage_on_the_path_changes_ttft_by_exactly_its_change(
    evaluator: Evaluator, spec: str, stage: str, before_ms: float, after_ms: float
) -> None:
    pair = change(evaluator, rag_trace().spans, spec)
    assert pair.before.ttft_ms == 140.0
    assert pair.before.stage(stage).ms == before_ms
    assert pair.after.stage(stage).ms == after_ms
    assert pair.after.ttft_ms == 140.0 + after_ms - before_ms
    others = {k: v for k, v in ms(pair.after).items() if k != stage}
    assert others == {k: v for k, v in ms(pair.before).items() if k != stage}
    assert pair.after.unattributed_ms == 0.0


@pytest.mark.parametrize("evaluator", EVALUATORS, ids=IDS)
def test_vllm_phases_move_with_their_request(evaluator: Evaluator) -> None:
    # prefill x0.5 halves the whole LLM call before the first token: the engine's frontend
    # 15 -> 7.5, queue 10 -> 5, prefill 70 -> 35 (its attributes rewritten), the hops
    # chat 1 -> 0.5 and POST 2 -> 1; the first token travels out through the gateway (1)
    # and the caller (1) unchanged.
    pair = change(evaluator, rag_trace().spans, "prefill=x0.5")
    assert pair.before.stage("prefill").breakdown == {
        "chat qwen2.5-7b": 1.0,
        "POST": 2.0,
        "vllm.frontend": 15.0,
        "vllm.queue": 10.0,
        "vllm.prefill": 70.0,
    }
    assert pair.after.stage("prefill").breakdown == {
        "chat qwen2.5-7b": 0.5,
        "POST": 1.0,
        "vllm.frontend": 7.5,
        "vllm.queue": 5.0,
        "vllm.prefill": 35.0,
    }
    assert pair.after.ttft_ms == 91.0
    assert ms(pair.after)["gateway"] == 10.0
    assert ms(pair.after)["network"] == 6.0


@pytest.mark.parametrize("evaluator", EVALUATORS, ids=IDS)
@pytest.mark.parametrize(
    ("name", "stage", "shift_ms"),
    [
        ("with-load-test-client.json", "prefill", -10.0),
        ("with-load-test-client.json", "retrieval", -5.0),
        ("with-load-test-client.json", "network", -1.0),
        ("with-load-test-client.json", "gateway", 1.0),
        ("gateway-only.json", "prefill", -10.0),
        ("gateway-only.json", "retrieval", 20.0),
    ],
)
def test_real_stack_traces_shift_by_the_change(
    evaluator: Evaluator, name: str, stage: str, shift_ms: float
) -> None:
    # On the real stack's spans (streamed httpx POST, vLLM's attributes, marks on every
    # hop) a shift on the path moves the stage and TTFT by it, to the verdict's 0.01 ms
    # rounding of each part.
    pair = change(evaluator, stack_trace(name), f"{stage}={shift_ms:+g}ms")
    before, after = pair.before, pair.after
    assert before.ttft_ms is not None
    assert after.ttft_ms is not None
    assert after.ttft_ms - before.ttft_ms == pytest.approx(shift_ms, abs=0.0201)
    assert (after.stage(stage).ms or 0) - (before.stage(stage).ms or 0) == pytest.approx(
        shift_ms, abs=0.0201
    )


def parallel(retrieval_end_ms: float = 50) -> TraceBuilder:
    """A gateway server span (its own root, first token at 70) with retrieval 10..50 beside
    a longer prompt 10..60, and validation 60..62 after both: the path runs through prompt
    (50) and validation; retrieval is off it. Gateway keeps 0..10, 60..62 and 62..70: 20."""
    b = TraceBuilder()
    root = b.add(
        "POST /v1/chat/completions",
        0,
        300,
        kind=SpanKind.SERVER,
        attributes={"gen_ai.response.time_to_first_chunk": 0.070},
    )
    b.add("retrieval rag-docs", 10, retrieval_end_ms, parent=root, attributes=RETRIEVAL)
    b.add("prompt.render", 10, 60, parent=root)
    b.add("gateway.validate", 60, 62, parent=root)
    return b


@pytest.mark.parametrize("evaluator", EVALUATORS, ids=IDS)
@pytest.mark.parametrize("spec", ["retrieval=x0.5", "retrieval=x1.2", "retrieval=-20ms"])
def test_a_stage_off_the_critical_path_changes_nothing(evaluator: Evaluator, spec: str) -> None:
    # Retrieval runs beside the longer prompt: faster, or slower while prompt still ends
    # last (10..58), nothing waits on it; a shift finds no time of it on the path.
    pair = change(evaluator, parallel().spans, spec)
    assert pair.before.stage("retrieval").ms == 0.0
    assert pair.before.stage("prompt").ms == 50.0
    assert pair.after == pair.before


@pytest.mark.parametrize("evaluator", EVALUATORS, ids=IDS)
def test_a_parallel_branch_that_becomes_the_longest_takes_over(evaluator: Evaluator) -> None:
    # Retrieval x2: 10..90, now past prompt's end (60). Validation waited on both, so it
    # moves to 90..92 and the first token to 100. The path runs through retrieval (80)
    # instead of prompt (0), and retrieval takes the blame: 80 - 40 = 40 over its limit
    # against gateway's 20 - 15 = 5. Before, prompt (50 - 20 = 30 over) led it.
    pair = change(evaluator, parallel().spans, "retrieval=x2")
    before, after = pair.before, pair.after
    assert (before.ttft_ms, ms(before)["retrieval"], ms(before)["prompt"]) == (70.0, 0.0, 50.0)
    assert before.blame == ("prompt", "gateway")
    assert (after.ttft_ms, ms(after)["retrieval"], ms(after)["prompt"]) == (100.0, 80.0, 0.0)
    assert ms(after)["gateway"] == 20.0
    assert after.blame == ("retrieval", "gateway")


@pytest.mark.parametrize("evaluator", EVALUATORS, ids=IDS)
def test_a_faster_span_beside_a_slower_one_takes_back_only_the_difference(
    evaluator: Evaluator,
) -> None:
    # Retrieval 10..80 leads the path (70) beside prompt 10..60. Made 20 ms faster it ends
    # at 60 with prompt: the tie goes to the span that started first, then the lowest id
    # (retrieval), and the 10 ms past prompt's end come off TTFT.
    b = parallel(retrieval_end_ms=80)
    b.spans[-1] = dataclasses.replace(
        b.spans[-1],
        start_ns=b.spans[-1].start_ns + 20_000_000,
        end_ns=b.spans[-1].end_ns + 20_000_000,
    )
    b.spans[0] = dataclasses.replace(
        b.spans[0], attributes={"gen_ai.response.time_to_first_chunk": 0.090}
    )
    before = change(evaluator, b.spans, "retrieval=x1").before
    assert (before.ttft_ms, ms(before)["retrieval"]) == (90.0, 70.0)
    pair = change(evaluator, b.spans, "retrieval=-20ms")
    assert (pair.after.ttft_ms, ms(pair.after)["retrieval"]) == (70.0, 50.0)
    pair = change(evaluator, b.spans, "retrieval=-40ms")  # now shorter than prompt
    assert (pair.after.ttft_ms, ms(pair.after)["retrieval"], ms(pair.after)["prompt"]) == (
        70.0,
        0.0,
        50.0,
    )
