"""Many traces judged, changed and judged again: the shares within budget with their
Wilson intervals, the p95s and the blame counts before and after, and `--stage` parsing."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from spanbudget.collector.spans import Span
from spanbudget.collector.stats import wilson_interval
from spanbudget.collector.whatif import (
    StageChange,
    blamed_next,
    parse_change,
    parse_changes,
    predict,
    render_json,
    render_table,
)

from tests.support.judging import BUDGET, NOW
from tests.support.traces import rag_trace


def traces() -> list[list[Span]]:
    """Ten reference traces, prefill 10..100 ms over its 98 (TTFT 150..240, all within the
    250 limit but prefill over its 120 limit from +30 on: blamed in 7 of them)."""
    return [rag_trace(prefill=10 * (i + 1), trace_id=f"{i + 1:032x}").spans for i in range(10)]


def test_halving_prefill_brings_every_trace_within_budget() -> None:
    result = predict(
        traces(), BUDGET, parse_changes(["prefill=x0.5"], BUDGET.stage_names()), evaluated_at=NOW
    )
    before, after = result.before, result.after
    # Prefill 108..198 ms: over 120 from the 3rd on, 8 of 10 overrun (blamed: prefill).
    assert (before.within, before.judged) == (2, 10)
    assert before.interval == wilson_interval(2, 10)
    assert before.blamed_first["prefill"] == 8
    # Halved, 54..99 ms: every trace within; nothing blamed.
    assert (after.within, after.judged) == (10, 10)
    assert after.blamed_first == dict.fromkeys(BUDGET.stage_names(), 0)
    assert blamed_next(after) is None
    assert blamed_next(before) == "prefill"
    # p95 of prefill 108..198 (linear interpolation: 193.5), halved exactly; TTFT with it.
    assert before.p95_ms["prefill"] == 193.5
    assert after.p95_ms["prefill"] == 96.75
    assert before.p95_ms["ttft"] == 235.5
    assert after.p95_ms["ttft"] == 235.5 - 96.75
    assert after.p95_ms["retrieval"] == before.p95_ms["retrieval"] == 18.0
    assert result.to_dict()["changed_verdicts"] == 10


def test_the_blame_moves_to_the_next_stage() -> None:
    # Retrieval +30 (48 ms, 8 over its limit) beside prefill 108..198: prefill leads the
    # blame where it is over by more than 8 ms; made faster (x0.5), retrieval is next.
    slow = [
        rag_trace(prefill=10 * (i + 1), retrieval=30, trace_id=f"{i + 1:032x}").spans
        for i in range(10)
    ]
    result = predict(
        slow, BUDGET, parse_changes(["prefill=x0.5"], BUDGET.stage_names()), evaluated_at=NOW
    )
    assert blamed_next(result.before) == "prefill"
    assert blamed_next(result.after) == "retrieval"
    assert result.after.blamed_first["retrieval"] == 10
    console = Console(width=80, record=True)
    render_table(result, BUDGET, console)
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "blamed next: retrieval, first in the blame of 10 traces (was prefill)" in text
    data = json.loads(render_json(result))
    assert data["blamed_next"] == "retrieval"
    assert data["after"]["within_budget"] == 0  # retrieval still overruns everywhere


def test_a_shift_where_the_stage_has_no_time_is_counted() -> None:
    # Server-only traces have no caller span: network is unmeasured, nothing to shift.
    spans = [rag_trace(client_root=False, trace_id=f"{i + 1:032x}").spans for i in range(3)]
    result = predict(
        spans, BUDGET, parse_changes(["network=-5ms"], BUDGET.stage_names()), evaluated_at=NOW
    )
    assert result.not_shifted == {"network": 3}
    assert all(p.after == p.before for p in result.pairs)


@pytest.mark.parametrize(
    ("text", "change"),
    [
        ("prefill=x0.5", StageChange("prefill", factor=0.5)),
        ("prefill=x2", StageChange("prefill", factor=2.0)),
        ("retrieval=-20ms", StageChange("retrieval", shift_ms=-20.0)),
        ("retrieval=+5ms", StageChange("retrieval", shift_ms=5.0)),
        (" prompt = +2.5 ms", StageChange("prompt", shift_ms=2.5)),
    ],
)
def test_stage_changes_parse(text: str, change: StageChange) -> None:
    assert parse_change(text) == change


@pytest.mark.parametrize("text", ["prefill", "prefill=0.5", "prefill=-20", "prefill=x-1", "=x1"])
def test_malformed_stage_changes_say_what_to_write(text: str) -> None:
    with pytest.raises(ValueError, match=r"NAME=x0\.8"):
        parse_change(text)


def test_unknown_or_repeated_stages_are_refused() -> None:
    with pytest.raises(ValueError, match="no stage 'decode'"):
        parse_changes(["decode=x0.5"], BUDGET.stage_names())
    with pytest.raises(ValueError, match="changed twice"):
        parse_changes(["prefill=x0.5", "prefill=-1ms"], BUDGET.stage_names())
