"""`report.html` in Chromium: the web UI's SVG charts in the UI's colours, every stage's
distribution holding every judged request, the phases, links into the UI and Jaeger, and a
page that a phone can read (tables scroll inside themselves, not the page)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.loadtest.render_html import render_html
from spanbudget.collector.loadtest.report import build_report

from tests.collector.ui.browser import Browser
from tests.support.reports import INFO, make_results

REPO = Path(__file__).resolve().parents[3]
UI = "http://127.0.0.1:4319"
JAEGER = "http://127.0.0.1:16686"


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(REPO / "budget.yaml").budget


@pytest.fixture
def page(budget: Budget, tmp_path: Path) -> Path:
    results = make_results(budget, 200)
    report = build_report(results, budget, replace(INFO, ui_url=UI, jaeger_ui=JAEGER))
    path = tmp_path / "report.html"
    path.write_text(render_html(report, results))
    return path


def test_the_report_draws_the_ui_charts_in_its_colours(
    browser: Browser, page: Path, budget: Budget
) -> None:
    browser.goto(page.as_uri())
    charts = browser.eval("[...document.querySelectorAll('svg.chart')].map(s => s.classList[1])")
    assert charts == ["bands", *["histogram"] * (len(budget.stages) + 2), "panels"]
    # The distributions hold every judged request with a first token.
    counts = browser.eval(
        """Object.fromEntries([...document.querySelectorAll('#distributions figure')].map(f =>
        [f.dataset.stage, [...f.querySelectorAll('rect.bar')]
          .reduce((n, r) => n + Number(r.dataset.count), 0)]))"""
    )
    stage_counts = browser.eval(
        """Object.fromEntries([...document.querySelectorAll('#stages tbody tr')].map(r =>
        [r.dataset.stage, Number(r.lastElementChild.textContent)]))"""
    )
    assert counts == {s.name: stage_counts[s.name] for s in budget.stages}
    timed = [r for r in make_results(budget, 200) if r.verdict is not None and r.verdict.timed]
    assert stage_counts["TTFT (trace)"] == len(timed) > 150
    # The stylesheet is the UI's: a bar over the limit is painted in its red, the first
    # stage's line in its blue.
    fills = browser.eval(
        """({over: getComputedStyle(document.querySelector('rect.bar.over')).fill,
             line: getComputedStyle(document.querySelector('polyline.line.s0')).stroke})"""
    )
    assert fills == {"over": "rgb(207, 34, 46)", "line": "rgb(78, 121, 167)"}
    # Links into the web UI's run, its traces by status, each slow trace and Jaeger.
    links = browser.eval("[...document.querySelectorAll('a')].map(a => a.href)")
    assert f"{UI}/runs/run-t" in links
    assert f"{UI}/traces?run_id=run-t&status=overrun" in links
    assert any(link.startswith(f"{UI}/traces/0000") for link in links)
    assert any(link.startswith(f"{JAEGER}/trace/0000") for link in links)
    phases = browser.eval(
        "[...document.querySelectorAll('#phases tbody th')].map(t => t.textContent)"
    )
    assert phases == ["nominal", "burst", "whole run"]
    assert browser.errors() == []


def test_the_report_fits_a_phone(browser: Browser, page: Path) -> None:
    browser.call("viewport", width=420, height=900)
    try:
        browser.goto(page.as_uri())
        widths = browser.eval(
            """({page: document.scrollingElement.scrollWidth, view: innerWidth,
                 text: Math.min(...[...document.querySelectorAll('svg.chart')].map(s =>
                   11 * s.getBoundingClientRect().width / s.viewBox.baseVal.width))})"""
        )
    finally:
        browser.call("viewport", width=1280, height=900)
    assert widths["page"] <= widths["view"]  # the wide tables scroll inside their box
    assert widths["text"] >= 8  # chart text, px: wide charts scroll rather than shrink
