"""Verdict times are rounded in integers where that is exact: bit for bit what
`round(ns / 1e6, 2)` gives, the rounding the verdict format was defined with."""

from __future__ import annotations

import math
import struct

from hypothesis import given
from hypothesis import strategies as st
from spanbudget.collector.judging.verdict_rules import round_ms as _round_ms


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
