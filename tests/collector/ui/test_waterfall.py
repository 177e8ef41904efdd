"""The waterfall drawn from a trace's spans: the critical-path segments are exactly the
evaluator's exclusive times, and the page puts them, and the first token, on one scale."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.spans import Span
from spanbudget.collector.ui.waterfall import build_waterfall, render_waterfall

from tests.support.judging import span_trees
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
EVALUATOR = Evaluator(load_budget(REPO / "budget.yaml").budget)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span_trees())
def test_segments_are_the_exclusive_times_and_tile_the_window(spans: list[Span]) -> None:
    view = build_waterfall(spans, EVALUATOR)
    if view is None:
        return  # not judged: no stage matches
    verdict = view.verdict
    for row in view.rows:
        drawn = sum(end - start for start, end in row.segments)
        assert abs(drawn - (row.self_ms if row.on_path else 0.0)) < 1e-6, row
    # The segments never overlap; those of staged spans plus `unattributed` (spans of no
    # stage, and time no span covers) make up the window.
    pieces = sorted(seg for row in view.rows for seg in row.segments)
    for (_, end), (start, _) in itertools.pairwise(pieces):
        assert start >= end - 1e-9
    window = view.first_token_ms if view.first_token_ms is not None else view.duration_ms
    staged = sum(e - s for row in view.rows if row.stage for s, e in row.segments)
    assert abs(staged + verdict.unattributed_ms - window) < 0.011
    for stage in verdict.stages:
        mine = sum(
            end - start
            for row in view.rows
            if row.stage == stage.name
            for start, end in row.segments
        )
        assert abs(mine - (stage.ms or 0.0)) < 0.011, stage.name


def test_skew_shift_phases_and_first_token_of_a_reference_trace() -> None:
    spans = rag_trace(vllm_skew_ms=40, retrieval=12).spans
    view = build_waterfall(spans, EVALUATOR)
    assert view is not None
    rows = {row.name: row for row in view.rows}
    assert rows["llm_request"].shift_ms == -40.0
    assert view.verdict.skew_adjusted_ms == 40.0
    assert [r.name for r in view.rows if r.virtual] == [
        "vllm.frontend",
        "vllm.queue",
        "vllm.prefill",
        "vllm.decode",
    ]
    assert view.first_token_ms == view.verdict.ttft_ms == 152.0
    assert rows["vllm.decode"].end_ms > view.first_token_ms  # the rest of the stream
    html = str(render_waterfall(view))
    lo = float(re.search(r'data-lo-ms="([\d.]+)"', html)[1])  # type: ignore[index]
    hi = float(re.search(r'data-hi-ms="([\d.]+)"', html)[1])  # type: ignore[index]
    assert lo == 0.0
    assert hi > 152.0  # the TTFT window, and a little past it to show the line
    at = re.search(r'id="first-token" class="first-token[^"]*" style="left:([\d.]+)%"', html)
    assert at is not None
    assert abs(float(at[1]) - 152.0 / hi * 100) < 0.001
    assert html.count('class="skew"') == 1
    grey = re.search(r'class="after-ft" style="left:([\d.]+)%', html)
    assert grey is not None
    assert grey[1] == at[1]  # greyed from the first-token line on


def test_a_trace_the_budget_does_not_judge_has_no_waterfall() -> None:
    spans = [Span("ab" * 16, "01" * 8, "GET /healthz", 0, 10**6, service="other")]
    assert build_waterfall(spans, EVALUATOR) is None
