"""Verdict times are rounded in integers where that is exact: bit for bit what
`round(ns / 1e6, 2)` gives, the rounding the verdict format was defined with; and the
apportioned parts of a window add up to the window as that rounding shows it, on a tie
too (DESIGN §5 rule 6), on both evaluator paths."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import COMPILED, Evaluator
from spanbudget.collector.judging.verdict_rules import apportion
from spanbudget.collector.judging.verdict_rules import round_ms as _round_ms

from tests.support.judging import NOW
from tests.support.layout import REPO
from tests.support.traces import rag_trace


def reference(ns: int) -> float:
    return round(ns / 1_000_000, 2)


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


near_ties = st.builds(
    lambda units, offset: units * 10_000 + offset,
    st.integers(min_value=0, max_value=10**12),
    st.sampled_from([0, 1, 4_999, 5_000, 5_001, 9_999]),
)


@given(st.one_of(st.integers(min_value=-(10**17), max_value=10**17), near_ties))
def test_integer_rounding_is_round_bit_for_bit(ns: int) -> None:
    assert bits(_round_ms(ns)) == bits(reference(ns))


def test_the_edges_the_integer_path_leaves_to_round() -> None:
    for ns in (-1, -5_000, -4_999, 10**15 - 1, 10**15, 10**15 + 5_000, 2**53 + 1):
        assert bits(_round_ms(ns)) == bits(reference(ns)), ns
    assert math.copysign(1.0, _round_ms(-1)) == -1.0  # -0.0, as round gives it


@given(st.lists(near_ties, min_size=1, max_size=7))
def test_apportioned_parts_add_up_to_the_total_as_shown(parts: list[int]) -> None:
    total = sum(parts)
    rounded = apportion(parts, total)
    assert round(sum(rounded), 2) == _round_ms(total)
    assert all(abs(r - p / 1e6) <= 0.0101 for r, p in zip(rounded, parts, strict=True))


@pytest.mark.parametrize("compiled", [True, False] if COMPILED else [False])
def test_a_window_on_a_tie_is_the_sum_of_its_parts(compiled: bool) -> None:
    """A window of 220.015 ms shows as 220.01 (`round` on the double nearest it) where
    half to even on whole units would make its parts add up to 220.02: the stages shown
    add up to the TTFT shown."""
    budget = load_budget(REPO / "budget.yaml").budget
    spans = rag_trace(network=10.015, gateway=10, retrieval=20, prompt=10, prefill=30).spans
    verdict = Evaluator(budget, compiled=compiled).evaluate(spans, evaluated_at=NOW)
    assert verdict is not None
    assert verdict.ttft_ms == 220.01
    shown = [stage.ms for stage in verdict.stages if stage.ms is not None]
    assert round(sum(shown) + verdict.unattributed_ms, 2) == verdict.ttft_ms
