"""The evaluator's three paths give identical judgements: the compiled fast path
(`_judge.pyx`, where it is built), the pure-Python fast path (`flat`, arrays) and the
reference path (`attribution`, a `Node` tree, what `judge(..., keep_tree=True)` runs): the
verdict, each span's stage, the root and the first token, on random trees and under every
preset."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spanbudget.collector.budget import Budget
from spanbudget.collector.budget_file import load_budget, load_preset
from spanbudget.collector.evaluate import COMPILED, Evaluator, Judged
from spanbudget.collector.flat import flatten
from spanbudget.collector.readers import parse_traces
from spanbudget.collector.spans import AttrValue, Span, SpanEvent, SpanKind, group_by_trace
from spanbudget.collector.stage_table import StageTable
from spanbudget.testing.traces import rag_trace
from tests.core.test_attribution_properties import BUDGET, NOW, span_trees

REPO = Path(__file__).resolve().parents[2]
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


# The fast paths to try: the compiled one only where it is built (make test checks that it
# is, tests/core/test_compiled_path.py).
COMPILED_CHOICES = [True, False] if COMPILED else [False]


def fast_paths(budget: Budget) -> list[Evaluator]:
    """An evaluator on each fast path this install has: compiled (where built), pure."""
    return [Evaluator(budget, compiled=compiled) for compiled in COMPILED_CHOICES]


def reference(evaluator: Evaluator, spans: Sequence[Span]) -> Judged | None:
    judged = evaluator.judge(spans, evaluated_at=NOW, keep_tree=True)
    if judged is not None and judged.tree is not None:
        judged.tree.release()
        judged = dataclasses.replace(judged, tree=None)
    return judged


def assert_same(evaluators: Sequence[Evaluator], spans: Sequence[Span]) -> None:
    expected = reference(evaluators[-1], spans)
    for evaluator in evaluators:
        fast = evaluator.judge(spans, evaluated_at=NOW)
        assert fast == expected, f"compiled={evaluator.compiled}"
        if fast is not None and expected is not None:
            assert fast.verdict.to_dict() == expected.verdict.to_dict()


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


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_trees())
def test_same_judgement_on_random_trees(spans: list[Span]) -> None:
    assert_same(fast_paths(BUDGET), spans)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(marked_trees(), st.sampled_from(PRESETS))
def test_same_judgement_under_every_preset(spans: list[Span], preset: str) -> None:
    assert_same(fast_paths(load_preset(preset).budget), spans)


@pytest.mark.parametrize("compiled", COMPILED_CHOICES)
@pytest.mark.parametrize("field", ["name", "kind", "service", "parent_span_id"])
def test_a_kept_walk_is_not_reused_for_a_trace_of_another_shape(field: str, compiled: bool) -> None:
    """The walk kept per trace shape tells traces apart by each span's name, kind,
    service and parent: a trace that differs from one already judged in that field alone,
    in a way that changes a span's stage, is judged as a new evaluator judges it."""
    spans = rag_trace(trace_id="0" * 32, retrieval=30, prefill=40, queue=5).spans
    values: dict[str, list[object]] = {
        "name": ["renamed"],
        "kind": list(SpanKind),
        "service": ["elsewhere"],
        "parent_span_id": [s.span_id for s in spans],
    }
    first = Evaluator(BUDGET, compiled=compiled).judge(spans, evaluated_at=NOW)
    for i, span in enumerate(spans[1:], start=1):
        for value in values[field]:
            if value == getattr(span, field) or value == span.span_id:
                continue
            other = [*spans[:i], dataclasses.replace(span, **{field: value}), *spans[i + 1 :]]
            fresh = Evaluator(BUDGET, compiled=compiled).judge(other, evaluated_at=NOW)
            if fresh is None or first is None or fresh.span_stages == first.span_stages:
                continue  # the walk holds the spans' stages: only such a change tells
            warm = Evaluator(BUDGET, compiled=compiled)
            warm.judge(spans, evaluated_at=NOW)
            assert warm.judge(other, evaluated_at=NOW) == fresh
            return
    pytest.fail(f"no change of {field} alone changes a span's stage")


@pytest.mark.parametrize("compiled", COMPILED_CHOICES)
def test_a_long_lived_evaluator_judges_as_a_new_one(compiled: bool) -> None:
    """The compiled selector memo carries nothing from one trace into the next."""
    warm = Evaluator(BUDGET, compiled=compiled)
    for i in range(60):
        builder = rag_trace(trace_id=f"{i:032x}", retrieval=i % 7, queue=i % 5, chat_error=i == 9)
        assert warm.judge(builder.spans, evaluated_at=NOW) == Evaluator(
            BUDGET, compiled=compiled
        ).judge(builder.spans, evaluated_at=NOW)
        assert_same([warm], builder.spans)


@pytest.mark.parametrize("budget_name", ["budget.yaml", *PRESETS])
def test_same_judgement_on_the_shared_fixtures(budget_name: str, shared_fixtures: Path) -> None:
    budget: Budget = (
        load_budget(REPO / budget_name).budget
        if budget_name.endswith(".yaml")
        else load_preset(budget_name).budget
    )
    evaluators = fast_paths(budget)
    files = sorted((shared_fixtures / "otlp").glob("*.json")) + sorted(
        (shared_fixtures / "jaeger").glob("*.json")
    )
    assert files
    for path in files:
        for spans in group_by_trace(parse_traces(path.read_bytes(), path.name)).values():
            assert_same(evaluators, spans)


def test_the_reference_path_takes_traces_in_a_parent_cycle() -> None:
    """Spans whose parents form a cycle are left to the tree, which adopts them."""
    a = Span("t" * 32, "a" * 16, "a", 0, 10, parent_span_id="b" * 16, kind=SpanKind.CLIENT)
    b = Span("t" * 32, "b" * 16, "auth.x", 1, 5, parent_span_id="a" * 16)
    table = StageTable([])
    assert flatten([a, b], table) is None
    assert_same(fast_paths(BUDGET), [a, b])
