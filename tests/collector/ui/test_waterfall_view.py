"""The waterfall's window and its rows as HTML: the TTFT window by default, the whole trace
and zooms from the `view` query parameter, each span's attributes in its row."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.ui.waterfall import (
    Waterfall,
    build_waterfall,
    render_waterfall,
    window_of,
)

from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
EVALUATOR = Evaluator(load_budget(REPO / "budget.yaml").budget)


@pytest.fixture(scope="module")
def view() -> Waterfall:
    built = build_waterfall(rag_trace(vllm_skew_ms=40, retrieval=12).spans, EVALUATOR)
    assert built is not None
    assert built.first_token_ms == 152.0
    assert built.duration_ms > 400  # the stream runs on well past the first token
    return built


def test_the_ttft_window_is_the_default_and_what_a_bad_view_falls_back_to(
    view: Waterfall,
) -> None:
    for text in (None, "", "ttft", "nonsense", "40-40", "-3-9", "9-3"):
        window = window_of(view, text)
        assert window.name == "ttft", text
        assert window.lo_ms == 0.0
        assert 152.0 < window.hi_ms <= 152.0 * 1.05, text


def test_whole_and_ranges_clamped_to_the_trace(view: Waterfall) -> None:
    whole = window_of(view, "whole")
    assert (whole.lo_ms, whole.hi_ms) == (0.0, view.duration_ms)
    zoom = window_of(view, "40.5-52")
    assert (zoom.name, zoom.lo_ms, zoom.hi_ms) == ("range", 40.5, 52.0)
    past = window_of(view, "100-99999")
    assert past.hi_ms == view.duration_ms


def styles(html: str, cls: str) -> list[tuple[float, float]]:
    """(left, width) in percent of every `<span class="{cls}…">`."""
    found = re.findall(rf'<span class="{cls}[^"]*" style="left:([\d.-]+)%;width:([\d.-]+)%"', html)
    return [(float(a), float(b)) for a, b in found]


def test_bars_of_the_window_fill_it_and_the_ones_outside_are_marked(view: Waterfall) -> None:
    html = str(render_waterfall(view))  # the TTFT window
    window = window_of(view)
    rows = {row.name: row for row in view.rows}
    # The critical path tiles the window from 0 to the first token: 152 of ~158 ms, so it
    # spans ~96 % of the width.
    cps = sorted(styles(html, "cp"))
    assert cps[0][0] == 0.0
    assert sum(w for _, w in cps) == pytest.approx(152.0 / window.hi_ms * 100, abs=0.01)
    # gateway.validate's bar is where its times say, in percent of the window.
    validate = rows["gateway.validate"]
    chunk = html[html.index(f'data-span-id="{validate.span_id}"') :]
    left, width = styles(chunk, "bar")[0]
    assert left == pytest.approx(validate.start_ms / window.hi_ms * 100, abs=0.001)
    assert width == pytest.approx(
        (validate.end_ms - validate.start_ms) / window.hi_ms * 100, abs=0.001
    )
    # Zoomed to retrieval: the prefill's spans lie after the window, and say so.
    zoomed = str(render_waterfall(view, window=window_of(view, "5-45")))
    decode = zoomed[zoomed.index(f'data-span-id="{rows["vllm.decode"].span_id}"') :]
    assert decode.index('class="off after"') < decode.index("</details>")
    for left, width in styles(zoomed, "bar"):
        assert left >= 0.0
        assert left + width <= 100.001


def test_zoom_links_and_the_minimap(view: Waterfall) -> None:
    html = str(render_waterfall(view))
    assert 'id="view-ttft" href="?view=ttft#waterfall" aria-current="true"' in html
    assert 'id="view-whole" href="?view=whole#waterfall"' in html
    link = r'class="zoom-stage" data-stage="(\w+)" href="\?view=([\d.-]+)#'
    stages = dict(re.findall(link, html))
    assert set(stages) == {"network", "gateway", "retrieval", "prompt", "prefill"}
    # A stage's link zooms to its first stretch on the path: the gateway's is its checks
    # before retrieval, not the whole request it wraps.
    lo, hi = (float(v) for v in stages["gateway"].split("-"))
    validate = next(r for r in view.rows if r.name == "gateway.validate")
    assert lo <= validate.start_ms < validate.end_ms <= hi < 20
    minimap = html[html.index('<svg class="wf-minimap"') : html.index("</svg>")]
    assert minimap.count("<a href=") == 9  # every stretch of every stage, in time order
    whole = str(render_waterfall(view, window=window_of(view, "whole")))
    assert 'id="view-whole" href="?view=whole#waterfall" aria-current="true"' in whole
    assert 'id="zoom-out"' not in whole


class _Rows(HTMLParser):
    """The text inside each `<details class="span-row">`'s attribute panel, by span id."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, str] = {}
        self._id: str | None = None
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "details" and "span-row" in (found.get("class") or ""):
            self._id = found["data-span-id"]
            self.rows[self._id or ""] = ""
        if self._id is not None and tag == "div" and found.get("class") == "span-attrs":
            self._depth = 1
        elif self._depth and tag == "div":
            self._depth += 1

    def handle_endtag(self, tag: str) -> None:
        if self._depth and tag == "div":
            self._depth -= 1
        if tag == "details":
            self._id = None

    def handle_data(self, data: str) -> None:
        if self._id is not None and self._depth:
            self.rows[self._id] += data + "|"


def test_each_row_carries_its_attributes(view: Waterfall) -> None:
    parser = _Rows()
    parser.feed(str(render_waterfall(view)))
    rows = {row.name: row for row in view.rows}
    assert set(parser.rows) == {row.span_id for row in view.rows}
    llm = parser.rows[rows["llm_request"].span_id]
    for key, value in rows["llm_request"].attributes:
        assert f"|{key}|{value}|" in llm
    assert "|gen_ai.usage.prompt_tokens|" in llm
    assert "|clock-skew shift|-40.00 ms" in llm
    assert "|gen_ai.operation.name|chat|" in parser.rows[rows["chat qwen2.5-7b"].span_id]
    assert "gen_ai.latency." in parser.rows[rows["vllm.prefill"].span_id]  # where it came from
