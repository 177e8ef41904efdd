"""Golden traces for the critical-path walk (DESIGN §5.5): ties after clipping, producer →
consumer, back-to-back siblings, and spans that have no time inside their parent.

Each trace hangs small children under a gateway server span that is its own root
(gateway stage; no caller span, so network is unmeasured), with the first token at
100 ms unless said otherwise. Children are given different stages so that the verdict
shows which one the walk went through. Every expected number is worked out by hand in the
comment above it; Jaeger UI's critical path gives the same, except where said.
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
RETRIEVAL = {"gen_ai.operation.name": "retrieval"}
QDRANT = {"db.system.name": "qdrant"}


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(REPO / "budget.yaml").budget


def server_root(b: TraceBuilder, end_ms: float = 100, first_token_ms: float = 100) -> str:
    return b.add(
        "POST /v1/chat/completions",
        0,
        end_ms,
        kind=SpanKind.SERVER,
        attributes={"gen_ai.response.time_to_first_chunk": first_token_ms / 1000},
    )


def judge(budget: Budget, builder: TraceBuilder) -> Verdict:
    verdict = Evaluator(budget).evaluate(builder.spans, evaluated_at=NOW)
    assert verdict is not None
    return verdict


def times(verdict: Verdict) -> dict[str, tuple[float | None, str]]:
    """Stage -> (ms, status), leaving out the two stages these traces never have."""
    return {
        s.name: (s.ms, s.status.value)
        for s in verdict.stages
        if s.name not in ("network", "prefill")
    }


@pytest.mark.parametrize("later_listed_first", [False, True])
def test_children_ending_together_go_to_the_one_that_started_first(
    budget: Budget, later_listed_first: bool
) -> None:
    # Retrieval 10..50 and prompt 30..50 end together. Retrieval started first, so it
    # covers 10..50 (40) and prompt is off the path; the root keeps 0..10 and 50..100 (60).
    # Which is listed first (and so has the lower span id) does not matter.
    b = TraceBuilder()
    root = server_root(b)
    if later_listed_first:
        b.add("prompt.render", 30, 50, parent=root)
        b.add("retrieval rag-docs", 10, 50, parent=root, attributes=RETRIEVAL)
    else:
        b.add("retrieval rag-docs", 10, 50, parent=root, attributes=RETRIEVAL)
        b.add("prompt.render", 30, 50, parent=root)
    verdict = judge(budget, b)
    assert times(verdict) == {
        "gateway": (60.0, "overrun"),
        "retrieval": (40.0, "warn"),
        "prompt": (0.0, "ok"),
    }
    assert verdict.ttft_ms == 100.0
    assert verdict.unattributed_ms == 0.0


@pytest.mark.parametrize(
    ("root_end_ms", "overflows"), [(100, "the parent"), (300, "the first token")]
)
def test_children_overflowing_together_compare_clipped_ends(
    budget: Budget, root_end_ms: float, overflows: str
) -> None:
    # Retrieval 20..120 and prompt 60..130 both run past 100 (`overflows`), so both end
    # at 100 once clipped: a tie, and retrieval started first. It covers 20..100 (80);
    # the root keeps 0..20 (20). Comparing the ends before clipping would pick prompt,
    # which ran longer past the end (prompt 40, root 60).
    b = TraceBuilder()
    root = server_root(b, end_ms=root_end_ms)
    b.add("retrieval rag-docs", 20, 120, parent=root, attributes=RETRIEVAL)
    b.add("prompt.render", 60, 130, parent=root)
    verdict = judge(budget, b)
    assert times(verdict) == {
        "gateway": (20.0, "overrun"),
        "retrieval": (80.0, "overrun"),
        "prompt": (0.0, "ok"),
    }
    assert verdict.ttft_ms == 100.0


def test_children_starting_before_their_parent_tie_on_the_unclipped_start(
    budget: Budget,
) -> None:
    # Under retrieval 30..60, prompt 20..70 and auth 25..70 both clip to 30..60. Prompt
    # started first (20 < 25), so it gets 30 ms; the root keeps 0..30 and 60..100 (70).
    b = TraceBuilder()
    root = server_root(b)
    retrieval = b.add("retrieval rag-docs", 30, 60, parent=root, attributes=RETRIEVAL)
    b.add("auth.verify", 25, 70, parent=retrieval)
    b.add("prompt.render", 20, 70, parent=retrieval)
    verdict = judge(budget, b)
    assert times(verdict) == {
        "gateway": (70.0, "overrun"),
        "retrieval": (0.0, "ok"),
        "prompt": (30.0, "overrun"),
    }
    assert verdict.stage("gateway").breakdown == {"POST /v1/chat/completions": 70.0}


@pytest.mark.parametrize(("first", "stage"), [("prompt", "prompt"), ("retrieval", "retrieval")])
def test_identical_children_go_to_the_lowest_span_id(
    budget: Budget, first: str, stage: str
) -> None:
    # Retrieval and prompt both run 10..50: the one listed first has the lower id and
    # gets the 40 ms (Jaeger takes the first in its input; ours never depends on order).
    b = TraceBuilder()
    root = server_root(b)
    for name in (first, *({"prompt", "retrieval"} - {first})):
        if name == "prompt":
            b.add("prompt.render", 10, 50, parent=root)
        else:
            b.add("retrieval rag-docs", 10, 50, parent=root, attributes=RETRIEVAL)
    verdict = judge(budget, b)
    assert verdict.stage(stage).ms == 40.0
    assert verdict.stage("gateway").ms == 60.0
    other = "prompt" if stage == "retrieval" else "retrieval"
    assert verdict.stage(other).ms == 0.0


def test_back_to_back_siblings_both_count(budget: Budget) -> None:
    # Retrieval 10..50 then prompt 50..90. Walking back from 100: prompt (50..90), then at
    # cursor 50 retrieval ends exactly there and is taken (10..50); the root keeps 0..10
    # and 90..100. Jaeger UI's strict `<` would skip retrieval and charge 10..50 to the
    # root (gateway 60, retrieval 0): jaegertracing/jaeger#9173, our one deliberate
    # difference.
    b = TraceBuilder()
    root = server_root(b)
    retrieval = b.add("retrieval rag-docs", 10, 50, parent=root, attributes=RETRIEVAL)
    b.add("query rag-docs", 30, 50, parent=retrieval, attributes=QDRANT)
    b.add("prompt.render", 50, 90, parent=root)
    verdict = judge(budget, b)
    assert times(verdict) == {
        "gateway": (20.0, "overrun"),
        "retrieval": (40.0, "warn"),
        "prompt": (40.0, "overrun"),
    }
    # Inside retrieval the query ends at its parent's end: retrieval 10..30, query 30..50.
    assert verdict.stage("retrieval").breakdown == {
        "retrieval rag-docs": 20.0,
        "query rag-docs": 20.0,
    }


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # A consumer does not block its producer: it and its query stay off the path, and
        # 20..50 is the producer's. Prompt 10..60 (50), root 0..10 and 60..100 (50).
        # Retrieval matched (off the path), so it is 0 ms `ok`, not `absent`.
        (
            SpanKind.CONSUMER,
            {"gateway": (50.0, "overrun"), "retrieval": (0.0, "ok"), "prompt": (50.0, "overrun")},
        ),
        # The same worker span as INTERNAL blocks: query 25..45 (20), worker 20..25 and
        # 45..50 (10), prompt 10..20 and 50..60 (20).
        (
            SpanKind.INTERNAL,
            {
                "gateway": (50.0, "overrun"),
                "retrieval": (30.0, "warn"),
                "prompt": (20.0, "warn"),
            },
        ),
    ],
)
def test_a_consumer_inside_its_producer_stays_off_the_path(
    budget: Budget, kind: SpanKind, expected: dict[str, tuple[float, str]]
) -> None:
    b = TraceBuilder()
    root = server_root(b)
    producer = b.add("prompt.enqueue", 10, 60, parent=root, kind=SpanKind.PRODUCER)
    worker = b.add(
        "retrieval worker",
        20,
        50,
        parent=producer,
        kind=kind,
        service="rag-worker",
        attributes=RETRIEVAL,
    )
    b.add("query rag-docs", 25, 45, parent=worker, service="rag-worker", attributes=QDRANT)
    verdict = judge(budget, b)
    assert times(verdict) == expected
    assert verdict.skew_adjusted_ms == 0.0  # the worker lies inside the producer


def test_a_consumer_after_its_producer_is_off_the_path_and_its_error_too(
    budget: Budget,
) -> None:
    # The consumer (40..90) runs after its producer (10..30) ended, and fails. It has no
    # time inside its parent, so it is not on the path: its error does not fail the
    # request, and 40..90 is the root's (root 0..10 and 30..100: 80, prompt 20).
    b = TraceBuilder()
    root = server_root(b)
    producer = b.add("prompt.enqueue", 10, 30, parent=root, kind=SpanKind.PRODUCER)
    b.add(
        "retrieval worker",
        40,
        90,
        parent=producer,
        kind=SpanKind.CONSUMER,
        attributes=RETRIEVAL,
        error=True,
    )
    verdict = judge(budget, b)
    assert times(verdict) == {
        "gateway": (80.0, "overrun"),
        "retrieval": (0.0, "ok"),
        "prompt": (20.0, "warn"),
    }
    assert verdict.status is Status.OVERRUN


def test_a_consumer_under_a_non_producer_blocks(budget: Budget) -> None:
    # Only a PRODUCER parent makes a consumer non-blocking: under the server span the
    # consumer 20..50 is on the path (30); the root keeps 70.
    b = TraceBuilder()
    root = server_root(b)
    b.add("retrieval worker", 20, 50, parent=root, kind=SpanKind.CONSUMER, attributes=RETRIEVAL)
    verdict = judge(budget, b)
    assert times(verdict)["retrieval"] == (30.0, "warn")
    assert verdict.stage("gateway").ms == 70.0


def test_an_error_on_a_span_after_the_first_token_does_not_fail_the_trace(
    budget: Budget,
) -> None:
    # A span the gateway starts after the first token (140) and that fails is outside
    # the window: it has no time on the critical path. It finishes last of the server
    # span's children, which must not put it on the path as a zero-length leftover.
    base = judge(budget, rag_trace())
    builder = rag_trace()
    server = builder.spans[1].span_id
    builder.add("stream.close", 150, 393, parent=server, error=True)
    verdict = judge(budget, builder)
    assert verdict.status is Status.OK
    assert verdict.to_dict()["stages"] == base.to_dict()["stages"]
    # A broken stream is different: the spans that carried it started before the first
    # token, so they are on the path and the request failed (DESIGN §5.7).
    broken = rag_trace(chat_error=True)
    broken.add("stream.close", 150, 393, parent=broken.spans[1].span_id, error=True)
    assert judge(budget, broken).status is Status.ERROR
