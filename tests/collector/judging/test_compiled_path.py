"""The compiled fast path (`_judge.pyx`): built here, judging the traces it can hold in
64-bit integers itself, handing the rest back, and never judging otherwise than the tree
(`attribution`, what `judge(..., keep_tree=True)` runs): the verdict, each span's stage,
the root and the first token, on random trees, under every preset and on the shared
fixtures; and spanbudget without it (no C compiler) judging every trace the same."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spanbudget.collector.budget.loader import load_budget, load_preset
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import COMPILED, PURE_PYTHON_ENV, Evaluator, Judged
from spanbudget.collector.judging.llm_calls import reading
from spanbudget.collector.judging.stage_table import StageTable
from spanbudget.collector.readers import parse_traces
from spanbudget.collector.spans import AttrValue, Span, SpanEvent, SpanKind, group_by_trace

from tests.support.judging import (
    BUDGET,
    NOW,
    PRESETS,
    assert_same,
    marked_trees,
    paths,
    span_trees,
)
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
PYX = REPO / "collector" / "judging" / "_judge.pyx"
needs_compiled = pytest.mark.skipif(not COMPILED, reason="the compiled path is not built")


def compiled_judge(evaluator: Evaluator) -> object:
    """What the compiled path alone answers for a trace: a Judged, None or HANDBACK."""
    core = evaluator._compiled
    assert core is not None
    return core


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_trees())
def test_same_judgement_on_random_trees(spans: list[Span]) -> None:
    assert_same(paths(BUDGET), spans)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(marked_trees(), st.sampled_from(PRESETS))
def test_same_judgement_under_every_preset(spans: list[Span], preset: str) -> None:
    assert_same(paths(load_preset(preset).budget), spans)


@pytest.mark.parametrize("compiled", [True, False] if COMPILED else [False])
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
    evaluators = paths(budget)
    files = sorted((shared_fixtures / "otlp").glob("*.json")) + sorted(
        (shared_fixtures / "jaeger").glob("*.json")
    )
    assert files
    for path in files:
        for spans in group_by_trace(parse_traces(path.read_bytes(), path.name)).values():
            assert_same(evaluators, spans)


def test_the_environment_switches_the_compiled_path_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`make test` runs the judging tests once more with SPANBUDGET_PURE_PYTHON=1: then an
    evaluator built without a choice judges on the tree; asking for either still works."""
    monkeypatch.setenv(PURE_PYTHON_ENV, "1")
    assert not Evaluator(BUDGET).compiled
    if COMPILED:
        assert Evaluator(BUDGET, compiled=True).compiled
    monkeypatch.setenv(PURE_PYTHON_ENV, "0")
    assert Evaluator(BUDGET).compiled is COMPILED


def test_traces_in_a_parent_cycle_go_to_the_tree() -> None:
    """Spans whose parents form a cycle are left to the tree, which adopts them."""
    a = Span("t" * 32, "a" * 16, "a", 0, 10, parent_span_id="b" * 16, kind=SpanKind.CLIENT)
    b = Span("t" * 32, "b" * 16, "auth.x", 1, 5, parent_span_id="a" * 16)
    assert_same(paths(BUDGET), [a, b])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(marked_trees(), st.sampled_from(PRESETS))
def test_spans_of_a_span_subclass_are_judged_as_spans(spans: list[Span], preset: str) -> None:
    """The compiled walks read a `Span`'s fields where its slots are; those of a subclass
    (which may keep them elsewhere) by name: judged alike."""

    @dataclasses.dataclass(frozen=True, slots=True)
    class Traced(Span):
        extra: int = 0

    fields = [f.name for f in dataclasses.fields(Span)]
    subclassed = [Traced(**{f: getattr(s, f) for f in fields}) for s in spans]
    for evaluator in paths(load_preset(preset).budget):
        judged = evaluator.judge(spans, evaluated_at=NOW)
        assert evaluator.judge(subclassed, evaluated_at=NOW) == judged


def test_the_compiled_path_is_built_from_this_source() -> None:
    """`make test` installs spanbudget, which compiles `_judge.pyx`: the suite must run
    on it, and not on a build older than the source."""
    assert COMPILED, "spanbudget.collector.judging._judge is not built: run `make test` again"
    from spanbudget.collector.judging import _judge

    built = Path(_judge.__file__)
    if built.parent == PYX.parent:  # an editable install builds beside the source
        assert built.stat().st_mtime >= PYX.stat().st_mtime, (
            "_judge.pyx changed after it was built: run `make test` (it rebuilds)"
        )


@needs_compiled
def test_it_judges_the_reference_traces_itself() -> None:
    from spanbudget.collector.judging._judge import HANDBACK

    evaluator = Evaluator(BUDGET, compiled=True)
    core = compiled_judge(evaluator)
    for i in range(30):
        spans = rag_trace(
            trace_id=f"{i:032x}", retrieval=i, prefill=i % 13, client_root=i % 3 > 0
        ).spans
        judged = core.judge(spans, NOW)  # type: ignore[attr-defined]
        assert judged is not HANDBACK
        assert isinstance(judged, Judged)
        tree = Evaluator(BUDGET, compiled=False)._judge_tree(spans, NOW, False)
        assert judged == tree  # the two paths before the evaluator settles the request


def _trace(base_ns: int, *, ttft_s: AttrValue = 0.1, root_ms: float = 300) -> list[Span]:
    """A client root and a server child, both from `base_ns`."""
    ms = 1_000_000
    root = Span(
        "1" * 32,
        "a" * 16,
        "chat m",
        base_ns,
        base_ns + round(root_ms * ms),
        kind=SpanKind.CLIENT,
        service="spanbudget-loadtest",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.response.time_to_first_chunk": ttft_s},
    )
    server = Span(
        "1" * 32,
        "b" * 16,
        "POST /v1/chat/completions",
        base_ns + 2 * ms,
        base_ns + 290 * ms,
        parent_span_id="a" * 16,
        kind=SpanKind.SERVER,
        service="rag-gateway",
    )
    return [root, server]


HANDED_BACK = {
    "times at 2**62 ns": _trace(2**62),
    "times beyond 64 bits": _trace(10**30),
    "a first token at 2**62 ns": _trace(0, ttft_s=5e9, root_ms=6e12),
    "a window of 2**53 ns": _trace(0, ttft_s=2**53 / 1e9, root_ms=1e11),
    "a first token 2**63 ns after the root": [
        dataclasses.replace(_trace(0)[0], start_ns=-(2**62) + 2, end_ns=0),
        dataclasses.replace(
            _trace(0)[1],
            start_ns=2**62 - 2,
            end_ns=2**62 - 2,
            attributes={"gen_ai.response.time_to_first_chunk": (2**62 - 2**40) / 1e9},
        ),
    ],
    "spans in a parent cycle": [
        dataclasses.replace(_trace(0)[0], parent_span_id="b" * 16),
        _trace(0)[1],
    ],
}


@needs_compiled
@pytest.mark.parametrize("case", sorted(HANDED_BACK))
def test_what_it_cannot_hold_in_64_bits_is_handed_back(case: str) -> None:
    from spanbudget.collector.judging._judge import HANDBACK

    spans = HANDED_BACK[case]
    assert compiled_judge(Evaluator(BUDGET, compiled=True)).judge(spans, NOW) is HANDBACK  # type: ignore[attr-defined]
    assert_same(paths(BUDGET), spans)


@needs_compiled
def test_a_time_that_is_not_an_int_is_not_truncated_but_handed_back() -> None:
    """Outside the span model (times are ints), yet C's conversion would cut 0.6 to 0
    where Python keeps it: the Python paths get such a trace as it is."""
    from spanbudget.collector.judging._judge import HANDBACK

    spans = [dataclasses.replace(_trace(0)[0], start_ns=0.6), _trace(0)[1]]  # type: ignore[arg-type]
    assert compiled_judge(Evaluator(BUDGET, compiled=True)).judge(spans, NOW) is HANDBACK  # type: ignore[attr-defined]


@needs_compiled
def test_times_just_inside_the_limit_are_judged_there() -> None:
    spans = _trace(2**62 - 10**12)
    judged = compiled_judge(Evaluator(BUDGET, compiled=True)).judge(spans, NOW)  # type: ignore[attr-defined]
    assert isinstance(judged, Judged)
    assert judged.verdict.ttft_ms == 100.0
    assert_same(paths(BUDGET), spans)


@pytest.mark.parametrize("compiled", [True, False] if COMPILED else [False])
def test_a_unit_left_over_goes_to_the_earliest_of_equal_remainders(compiled: bool) -> None:
    """Largest-remainder rounding: network and gateway have 5 µs each of a 10 µs
    window; the one 0.01 ms unit goes to the first in budget order."""
    root = Span(
        "1" * 32,
        "a" * 16,
        "chat m",
        0,
        10_000,
        kind=SpanKind.CLIENT,
        service="spanbudget-loadtest",
        attributes={"gen_ai.operation.name": "chat", "gen_ai.response.time_to_first_chunk": 1e-5},
    )
    server = Span(
        "1" * 32,
        "b" * 16,
        "POST",
        5_000,
        10_000,
        parent_span_id="a" * 16,
        kind=SpanKind.SERVER,
        service="rag-gateway",
    )
    verdict = Evaluator(BUDGET, compiled=compiled).evaluate([root, server], evaluated_at=NOW)
    assert verdict is not None
    assert (verdict.stage("network").ms, verdict.stage("gateway").ms) == (0.01, 0.0)


class Seconds(float):
    """A float subclass, as numpy's float64 is one."""


# Values a mark or a vLLM phase may carry: the odd ones say nothing (they are ignored).
ODD_VALUES: list[AttrValue] = [
    0.02,
    0,
    7,
    -0.001,
    math.nan,
    math.inf,
    -math.inf,
    1e300,
    4.7e9,  # its nanoseconds are beyond 2**62
    10**400,
    True,
    False,
    "0.02",
    Seconds(0.031),
    float(np.float64(0.044)),
    [0.1],
]
BASES = [0, -(10**9), 1_760_000_000_000_000_000, 2**62 - 10**11, 2**62 + 5, 2**63]
MARK_KEYS = [
    "gen_ai.response.time_to_first_chunk",
    "gen_ai.latency.time_to_first_token",
    "gen_ai.latency.time_in_queue",
    "gen_ai.latency.time_in_model_prefill",
    "gen_ai.server.time_to_first_token",
]


@st.composite
def odd_traces(draw: st.DrawFn) -> list[Span]:
    """The reference trace moved anywhere in time, its marks and vLLM's phases given odd
    values, and a first-token event at an odd time."""
    base = draw(st.sampled_from(BASES))
    spans = rag_trace(retrieval=draw(st.integers(0, 40)), queue=draw(st.integers(0, 30))).spans
    shift = base - spans[0].start_ns
    out = []
    for span in spans:
        attributes = dict(span.attributes)
        for key in MARK_KEYS:
            if (key in attributes or draw(st.integers(0, 5)) == 0) and draw(st.booleans()):
                attributes[key] = draw(st.sampled_from(ODD_VALUES))
        events = span.events
        if draw(st.integers(0, 4)) == 0:
            at = draw(st.sampled_from([span.start_ns + shift + 5_000_000, 2**62, -(2**63), 10**25]))
            events = (SpanEvent("First Token Stream Event", at),)
        out.append(
            dataclasses.replace(
                span,
                start_ns=span.start_ns + shift,
                end_ns=span.end_ns + shift,
                attributes=attributes,
                events=events,
            )
        )
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(odd_traces(), st.sampled_from(["budget.yaml", "openllmetry", "vllm-v0"]))
def test_odd_values_and_times_judge_alike_on_every_path(spans: list[Span], budget: str) -> None:
    table = BUDGET if budget == "budget.yaml" else load_preset(budget).budget
    assert_same(paths(table), spans)


def test_a_change_to_the_verdict_classes_stops_the_compiled_path() -> None:
    """It fills the frozen dataclasses slot by slot: a field it does not know would be
    left unset, so it refuses to start instead."""
    if not COMPILED:
        pytest.skip("the compiled path is not built")
    from spanbudget.collector.judging._judge import CompiledJudge

    @dataclasses.dataclass(frozen=True, slots=True)
    class Extended(Judged):
        extra: int = 0

    with pytest.raises(RuntimeError, match="fields changed"):
        CompiledJudge(BUDGET, StageTable([]), (), [], reading(()), Extended)


# Runs in a fresh interpreter in which the extension cannot be imported, as where no C
# compiler built it: prints what it judged, as JSON.
WITHOUT_EXTENSION = """
import json, sys
from datetime import datetime

class NoExtension:
    def find_spec(self, name, path=None, target=None):
        if name == "spanbudget.collector.judging._judge":
            raise ImportError("no C compiler built it")
        return None

sys.meta_path.insert(0, NoExtension())

from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import COMPILED, Evaluator
from tests.support.traces import rag_trace

budget = load_budget(__import__("pathlib").Path(sys.argv[1])).budget
evaluator = Evaluator(budget)
try:
    Evaluator(budget, compiled=True)
    insisting = "built"
except ImportError as error:
    insisting = str(error)
now = datetime.fromisoformat(sys.argv[2])
verdicts = [
    evaluator.evaluate(rag_trace(trace_id=f"{i:032x}", retrieval=i, prefill=i % 17,
                                 client_root=i % 4 > 0, chat_error=i == 7).spans,
                       evaluated_at=now).to_dict()
    for i in range(60)
]
print(json.dumps({"compiled": COMPILED, "evaluator": evaluator.compiled,
                  "insisting": insisting, "verdicts": verdicts}))
"""


def test_without_the_extension_every_trace_is_judged_the_same() -> None:
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTENSION, str(REPO / "budget.yaml"), NOW.isoformat()],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    alone = json.loads(out)
    assert alone["compiled"] is False
    assert alone["evaluator"] is False
    assert "not built here" in alone["insisting"]
    here = Evaluator(BUDGET)
    expected = []
    for i in range(60):
        spans = rag_trace(
            trace_id=f"{i:032x}",
            retrieval=i,
            prefill=i % 17,
            client_root=i % 4 > 0,
            chat_error=i == 7,
        ).spans
        verdict = here.evaluate(spans, evaluated_at=NOW)
        assert verdict is not None
        expected.append(verdict.to_dict())
    assert alone["verdicts"] == expected
    assert {v["status"] for v in expected} >= {"ok", "warn", "overrun", "error"}


@pytest.mark.skipif(not COMPILED, reason="the compiled evaluator is not built")
def test_the_compiled_evolve_is_dataclasses_replace() -> None:
    """Every judged trace's verdict and `Judged` are copied with changes by `_judge.evolve`:
    the same objects as `dataclasses.replace` makes, and the same refusal of a field that
    is not there."""
    from spanbudget.collector.judging import _judge

    judged = Evaluator(BUDGET).judge(rag_trace().spans, evaluated_at=datetime.now(UTC))
    assert judged is not None
    verdict = judged.verdict
    changes = {"attributes": {"k": 1}, "damaged": {"missing_parent": 1}, "response_ms": 2.5}
    assert _judge.evolve(verdict, **changes) == dataclasses.replace(verdict, **changes)
    assert _judge.evolve(verdict) == verdict
    other = dataclasses.replace(verdict, ttft_ms=1.0)
    assert _judge.evolve(judged, verdict=other) == dataclasses.replace(judged, verdict=other)
    with pytest.raises(TypeError, match="no field 'nope'"):
        _judge.evolve(verdict, nope=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        _judge.evolve(verdict).status = verdict.status  # type: ignore[misc]
