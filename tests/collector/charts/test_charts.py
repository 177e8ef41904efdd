"""The SVG charts: numbers in, marks where the numbers say."""

from __future__ import annotations

import re

from spanbudget.collector.charts import (
    BandRow,
    BudgetRow,
    StackPart,
    budget_bars,
    histogram,
    stage_bands,
    stage_stack,
)


def floats(pattern: str, text: str) -> list[float]:
    return [float(v) for v in re.findall(pattern, text)]


def test_bands_put_each_percentile_on_its_row_scale() -> None:
    svg = str(
        stage_bands([BandRow("retrieval", 20, 40, 10, 50, 52), BandRow("prompt", 10, 20, 1, 2, 3)])
    )
    # Each row's scale: plot width over max(1.5 x limit, 1.08 x p99), from x = 92.
    plot = 760 - 92 - 220
    top = max(40 * 1.5, 52 * 1.08)
    assert floats(r'circle class="q p95 dot-over" cx="([\d.]+)"', svg) == [
        round(92 + 50 * plot / top, 2)
    ]
    assert 'dot-ok" cx="' in svg  # prompt's p95 is within its target
    assert svg.count('class="band ok"') == svg.count('class="band over"') == 2
    assert 'aria-label="Stage percentiles' in svg


def test_histogram_counts_and_marks() -> None:
    svg = str(histogram([0, 100, 200, 300], [3, 5, 1], target_ms=170, limit_ms=250))
    assert floats(r'data-count="(\d+)"', svg) == [3, 5, 1]
    assert re.findall(r'class="bar (\w+)"', svg) == ["ok", "warn", "over"]
    assert floats(r'class="mark limit" x1="([\d.]+)"', svg) == [round(40 + 250 / 300 * 592, 2)]


def test_stack_widths_are_proportional_to_stage_times() -> None:
    svg = str(
        stage_stack([StackPart("a", 0, 50), StackPart("b", 1, 150)], limit_ms=250, target_ms=170)
    )
    widths = floats(r'<rect class="s\d" x="[\d.]+" y="2" width="([\d.]+)"', svg)
    assert abs(widths[1] / widths[0] - 3) < 0.01
    scale = 178 / 300  # the limit x 1.2 is the scale's end
    assert floats(r'class="mark limit" x1="([\d.]+)"', svg) == [round(1 + 250 * scale, 2)]


def test_budget_bars_show_allocated_and_actual() -> None:
    rows = [
        BudgetRow("retrieval", 2, 48.0, 20, 40, "overrun"),
        BudgetRow("network", 0, None, 30, 50, "unmeasured"),
    ]
    svg = str(
        budget_bars(rows, ttft_ms=48.0, total_target_ms=140, total_limit_ms=200, unattributed_ms=0)
    )
    assert 'rect class="s2 actual st-overrun"' in svg
    assert "unmeasured" in svg
    assert floats(r'data-row="actual".*?data-ms="([\d.]+)"', svg)[:1] == [48.0]
