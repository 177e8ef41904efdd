"""The web UI's compare view: two runs or two windows of a real collector stage by stage,
each stage's two distributions, each side's slowest traces linked to their pages; reached
from the runs page. One test drives it in headless Chromium.

Set SPANBUDGET_UI_SCREENSHOTS=docs to refresh docs/ui-compare.png from the browser test.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image
from spanbudget.collector.spans import Span

from tests.collector.ui.browser import Browser
from tests.support.collector import Collector, running_collector, send_spans
from tests.support.traces import rag_trace

SHOTS = os.environ.get("SPANBUDGET_UI_SCREENSHOTS")


def _run(run_id: str, count: int, seed: int, first: int, slow_ms: float = 0.0) -> list[Span]:
    """`count` requests of the reference path with seeded jitter, in run `run_id`."""
    rng = random.Random(seed)
    spans: list[Span] = []
    for i in range(count):
        for span in rag_trace(
            trace_id=f"{first + i:032x}",
            network=rng.uniform(0, 4),
            retrieval=rng.uniform(0, 10) + slow_ms,
            prompt=rng.uniform(0, 3),
            queue=rng.uniform(0, 20),
            prefill=rng.uniform(0, 25),
        ).spans:
            if "loadtest.run_id" in span.attributes:
                span = replace(span, attributes={**span.attributes, "loadtest.run_id": run_id})
            spans.append(span)
    return spans


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    """Run `before` and run `after`, whose retrieval is 15 ms slower, 80 requests each."""
    with running_collector(tmp_path_factory.mktemp("compare")) as running:
        send_spans(running, _run("before", 80, 1, 1))
        send_spans(running, _run("after", 80, 2, 1001, slow_ms=15))
        assert running.pipeline.core.wait_idle(30)
        running.verdict(f"{80:032x}")
        running.verdict(f"{1080:032x}")
        yield running


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_two_runs_compared_show_the_slowed_stage_and_link_the_slowest_traces(
    collector: Collector,
) -> None:
    response = collector.client.get("/compare", params={"base": "before", "candidate": "after"})
    assert response.status_code == 200, response.text
    page = response.text
    assert 'data-stage="retrieval">retrieval: slower' in page
    for stage in ("network", "gateway", "prompt", "prefill"):
        assert f'data-stage="{stage}">{stage}: no detectable change' in page
    said = _text(page)
    assert "base : run before , 80 requests" in said
    # Both distributions of each stage, and each side's slowest retrievals linked.
    section = re.search(r'id="stage-retrieval">(.*?)</section>', page, re.S)
    assert section is not None
    assert section.group(1).count("<svg") == 2
    links = re.findall(r'href="/traces/([0-9a-f]{32})"', section.group(1))
    assert len(links) == 10
    assert all(int(t, 16) <= 80 for t in links[:5])
    assert all(int(t, 16) > 1000 for t in links[5:])
    # The first linked trace of the slower side is its slowest retrieval, and it is there.
    trace = collector.client.get(f"/traces/{links[5]}")
    assert trace.status_code == 200
    assert 'href="/runs/before"' in page
    assert 'href="/runs/after"' in page


def test_two_windows_compare_and_bad_input_says_what_to_change(collector: Collector) -> None:
    same = collector.client.get("/compare", params={"base": "1h", "candidate": "1h.."})
    assert same.status_code == 200
    assert "base : window 1h , 160 requests" in _text(same.text)
    assert "slower" not in re.sub(r"<p class=\"hint\">.*?</p>", "", same.text, flags=re.S)
    bad = collector.client.get("/compare", params={"base": "yesterday..now", "candidate": "1h"})
    assert bad.status_code == 400
    assert "SINCE..UNTIL" in bad.text
    empty = collector.client.get("/compare", params={"base": "nosuchrun", "candidate": "after"})
    assert empty.status_code == 400
    assert "base nosuchrun: no judged request" in empty.text
    form = collector.client.get("/compare")
    assert form.status_code == 200
    assert '<option value="before">' in form.text


def test_the_runs_page_offers_to_compare_its_runs(collector: Collector) -> None:
    page = collector.client.get("/runs").text
    form = re.search(r'<form id="compare-runs".*?</form>', page, re.S)
    assert form is not None
    assert 'action="/compare"' in form.group(0)
    # the newest run is the candidate, the one before it the base
    assert re.search(r'name="base">.*?<option value="before" selected>', form.group(0), re.S)
    assert re.search(r'name="candidate">.*?<option value="after" selected>', form.group(0), re.S)


@pytest.mark.slow
def test_the_compare_view_in_chromium(
    browser: Browser, collector: Collector, tmp_path: Path
) -> None:
    browser.color_scheme("light")
    browser.errors()
    assert browser.goto(collector.url + "/runs") == 200
    url = browser.click("#compare-runs button")
    assert "/compare?base=before&candidate=after" in url
    verdicts = browser.eval(
        "[...document.querySelectorAll('.cmp-verdicts .badge')].map(b => b.innerText)"
    )
    assert "retrieval: slower" in verdicts
    assert browser.eval("document.querySelectorAll('.cmp-stage svg.chart').length") == 12
    colour = browser.eval(
        "getComputedStyle(document.querySelector('.cmp-verdicts .cmp-slower')).color"
    )
    assert colour == "rgb(207, 34, 46)"  # the over-limit red of charts.css
    path = browser.screenshot(tmp_path / "compare.png")
    colours = Image.open(path).convert("RGB").getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 150  # a page that drew its charts, not a blank one
    if SHOTS:
        shutil.copy(path, Path(SHOTS) / "ui-compare.png")
    link = browser.eval("document.querySelector('.cmp-slowest a').getAttribute('href')")
    assert browser.goto(collector.url + link) == 200
    assert browser.errors() == [], "console errors or failed requests on the page"
