"""Random traces for the evaluator's properties, and the check that its two paths agree.

`span_trees` draws traces in the reference path's shapes with ties, producers and
consumers, orphans, duplicates, nested first-token marks, streamed SERVER children that
outlive their CLIENT parents, and spans on one host or several (DESIGN §5 rules 1–5).
`assert_same` holds the compiled path (where it is built) to the tree's judgement.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import strategies as st
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import COMPILED, Evaluator, Judged
from spanbudget.collector.spans import AttrValue, Span, SpanEvent, SpanKind

REPO = Path(__file__).resolve().parents[2]
BUDGET: Budget = load_budget(REPO / "budget.yaml").budget
NOW = datetime(2026, 12, 2, tzinfo=UTC)
MS = 1_000_000
BASE_NS = 1_000_000 * MS
ORPHAN_PARENT = "00000000deadbeef"  # a parent id that no span in a drawn trace has

# Shapes that claim each stage, and some that claim none.
SHAPES = [
    ("chat m", SpanKind.CLIENT, "spanbudget-loadtest", {"gen_ai.operation.name": "chat"}),
    ("POST /v1/chat/completions", SpanKind.SERVER, "rag-gateway", {}),
    ("auth.verify", SpanKind.INTERNAL, "rag-gateway", {}),
    ("retrieval docs", SpanKind.INTERNAL, "rag-gateway", {"gen_ai.operation.name": "retrieval"}),
    ("query docs", SpanKind.INTERNAL, "rag-gateway", {"db.system.name": "qdrant"}),
    ("prompt.render", SpanKind.INTERNAL, "rag-gateway", {}),
    ("chat m", SpanKind.CLIENT, "rag-gateway", {"gen_ai.operation.name": "chat"}),
    ("POST", SpanKind.CLIENT, "rag-gateway", {}),
    ("llm_request", SpanKind.SERVER, "vllm", {}),
    # vLLM's per-phase spans: under a llm_request they replace the phases it reads.
    ("vllm_prefill", SpanKind.INTERNAL, "vllm", {}),
    ("vllm_async_kv_transfer", SpanKind.INTERNAL, "vllm", {}),
    ("cache.get", SpanKind.INTERNAL, "redis", {}),
    ("GET /healthz", SpanKind.SERVER, "other", {}),
    # Producers and consumers: a consumer under a producer is off the critical path.
    ("prompt.enqueue", SpanKind.PRODUCER, "rag-gateway", {}),
    ("publish jobs", SpanKind.PRODUCER, "rag-gateway", {}),
    ("retrieval worker", SpanKind.CONSUMER, "rag-worker", {"gen_ai.operation.name": "retrieval"}),
    ("process jobs", SpanKind.CONSUMER, "rag-gateway", {}),
]
# Hosts a span may name: none (its service stands in), or one of two machines.
HOSTS = [None, "node-a", "node-b"]

PRESETS = ["genai", "openinference", "openlit", "openllmetry", "vllm", "vllm-v0"]
EVENTS = ["First Token Stream Event", "gen_ai.content.completion.chunk", "other"]
# Attributes that presets' selectors and marks read, to give random spans some of them.
EXTRA_ATTRIBUTES: list[dict[str, AttrValue]] = [
    {},
    {"gen_ai.request.stream": True, "gen_ai.server.time_to_first_token": 0.004},
    {"gen_ai.response.time_to_first_chunk": 0.003},
    {"gen_ai.latency.time_to_first_token": 0.02, "gen_ai.latency.time_in_queue": 0.005},
    {"openinference.span.kind": "RETRIEVER"},
    {"gen_ai.request.model": "m", "loadtest.run_id": "r"},
    {"db.system": "Qdrant", "http.status_code": 500},
]


def seconds(most: float, *, coarse: bool) -> st.SearchStrategy[float]:
    """Durations in seconds; on the coarse grid, whole multiples of 10 ms."""
    if coarse:
        return st.integers(min_value=0, max_value=round(most * 100)).map(lambda n: n / 100)
    return st.floats(min_value=0, max_value=most, allow_nan=False)


@st.composite
def span_trees(draw: st.DrawFn) -> list[Span]:
    """One random trace, its spans in a random order (see the module's docstring)."""
    count = draw(st.integers(min_value=1, max_value=14))
    # A coarse grid makes ties common: children that end together, with their parent, or
    # with the first token, and children that overflow their parent or the mark together.
    step = draw(st.sampled_from([MS // 4, 10 * MS]))
    # Per service, one host or none, as deployments have it; some spans then differ.
    host_of = {service: draw(st.sampled_from(HOSTS)) for _, _, service, _ in SHAPES}
    spans: list[Span] = []
    by_id: dict[str, Span] = {}
    for index in range(count):
        name, kind, service, attrs = draw(st.sampled_from(SHAPES))
        attributes: dict[str, AttrValue] = dict(attrs)
        start = draw(st.integers(min_value=0, max_value=75 * MS // step)) * step
        duration = draw(st.integers(min_value=0, max_value=100 * MS // step)) * step
        if index and draw(st.booleans()):
            # skewed remote child, possibly outliving its parent by far
            unit = max(step, MS)
            start += draw(st.integers(min_value=-60 * MS // unit, max_value=60 * MS // unit)) * unit
        choice = draw(st.integers(min_value=0, max_value=9)) if index else 0
        if choice == 0:
            parent = None
        elif choice == 1:
            parent = ORPHAN_PARENT
        else:
            parent = spans[draw(st.integers(min_value=0, max_value=index - 1))].span_id
        end = start + duration
        parent_span = by_id.get(parent or "")
        if index and draw(st.integers(min_value=0, max_value=2)) == 0:
            # End with the parent or another earlier span (a sibling, say), or overflow it.
            other = parent_span if draw(st.booleans()) else None
            if other is None:
                other = spans[draw(st.integers(min_value=0, max_value=index - 1))]
            end = max(start, other.end_ns - BASE_NS + draw(st.sampled_from([0, 0, step, 3 * step])))
        if (
            parent_span is not None
            and kind is SpanKind.SERVER
            and parent_span.kind is SpanKind.CLIENT
            and draw(st.booleans())
        ):
            # A streamed response: it starts inside its client span and outlives it.
            low, high = parent_span.start_ns - BASE_NS, parent_span.end_ns - BASE_NS
            start = low + draw(st.integers(min_value=0, max_value=4)) * (high - low) // 5
            end = high + draw(st.integers(min_value=1, max_value=80 * MS // step)) * step
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            attributes["gen_ai.response.time_to_first_chunk"] = draw(
                seconds(0.5, coarse=step >= MS)
            )
        if name == "llm_request":
            for key in (
                "gen_ai.latency.time_to_first_token",
                "gen_ai.latency.time_in_queue",
                "gen_ai.latency.time_in_model_prefill",
            ):
                attributes[key] = draw(seconds(0.3, coarse=step >= MS))
        host = host_of[service] if draw(st.integers(0, 4)) else draw(st.sampled_from(HOSTS))
        span = Span(
            trace_id="0" * 31 + "1",
            span_id=f"{index + 1:016x}",
            name=name,
            start_ns=BASE_NS + start,
            end_ns=BASE_NS + end,
            parent_span_id=parent,
            kind=kind,
            service=service,
            attributes=attributes,
            error=draw(st.integers(min_value=0, max_value=20)) == 0,
            host=host,
        )
        spans.append(span)
        by_id[span.span_id] = span
    if draw(st.booleans()):  # duplicates count once
        spans.append(spans[draw(st.integers(min_value=0, max_value=len(spans) - 1))])
    return draw(st.permutations(spans))


@st.composite
def marked_trees(draw: st.DrawFn) -> list[Span]:
    """Random trees whose spans also carry preset marks, events and attributes."""
    spans = draw(span_trees())
    out = []
    for span in spans:
        extra = draw(st.sampled_from(EXTRA_ATTRIBUTES))
        events: tuple[SpanEvent, ...] = ()
        if draw(st.integers(min_value=0, max_value=3)) == 0:
            at = span.start_ns + draw(st.integers(min_value=-1_000_000, max_value=50_000_000))
            events = (SpanEvent(draw(st.sampled_from(EVENTS)), at),)
        out.append(
            dataclasses.replace(
                span, attributes={**span.attributes, **extra}, events=events or span.events
            )
        )
    return out


def paths(budget: Budget) -> list[Evaluator]:
    """An evaluator on each path this install has: compiled (where built), then the tree."""
    return [Evaluator(budget, compiled=True)] * COMPILED + [Evaluator(budget, compiled=False)]


def tree_judgement(evaluator: Evaluator, spans: Sequence[Span]) -> Judged | None:
    """What the reference path (the tree) judges, without the tree itself."""
    judged = evaluator.judge(spans, evaluated_at=NOW, keep_tree=True)
    if judged is not None and judged.tree is not None:
        judged.tree.release()
        judged = dataclasses.replace(judged, tree=None)
    return judged


def assert_same(evaluators: Sequence[Evaluator], spans: Sequence[Span]) -> None:
    """Every evaluator judges `spans` as the tree does: verdict, stages, root, first token."""
    expected = tree_judgement(evaluators[-1], spans)
    for evaluator in evaluators:
        judged = evaluator.judge(spans, evaluated_at=NOW)
        assert judged == expected, f"compiled={evaluator.compiled}"
        if judged is not None and expected is not None:
            assert judged.verdict.to_dict() == expected.verdict.to_dict()
