"""The web UI in headless Chromium against the reference path running as processes.

Real traces come from a load test through the real gateway and engine emulator; a few
more, built to a known shape (clock skew, a burst of retrieval overruns that fires an
alert), go to the same collector over OTLP/HTTP. Each page must load without console
errors or failed requests, draw something, and draw it where the verdict says.

Set SPANBUDGET_UI_SCREENSHOTS=docs to refresh the screenshots the README shows.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from spanbudget.collector.loadtest.files import read_results

from tests.collector.ui.browser import Browser
from tests.collector.ui.conftest import JAEGER_UI, RUN_ID, UiStack, wait_for_verdicts
from tests.support.collector import otlp_json
from tests.support.otlp import to_request
from tests.support.servers import wait_until
from tests.support.traces import rag_trace

pytestmark = pytest.mark.slow
STAGES = ("network", "gateway", "retrieval", "prompt", "prefill")
SKEW_MS = 40.0
SHOTS = os.environ.get("SPANBUDGET_UI_SCREENSHOTS")


@dataclass
class Traces:
    real: list[str]  # the load test's, oldest first
    skewed: str  # vLLM's span 40 ms off its parent's clock
    burst: list[str]  # retrieval overruns, enough to fire the retrieval alert


def _post(stack: UiStack, spans: Any) -> None:
    response = stack.client.post(
        "/v1/traces",
        content=otlp_json(to_request(spans)),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text


@pytest.fixture(scope="module")
def traces(stack: UiStack) -> Traces:
    real = [r.request.trace_id for r in read_results(stack.run_dir / "requests.csv")]
    skewed = uuid.uuid4().hex
    _post(stack, rag_trace(trace_id=skewed, vllm_skew_ms=SKEW_MS, retrieval=5).spans)
    burst = [uuid.uuid4().hex for _ in range(80)]
    for trace_id in burst:
        _post(stack, rag_trace(trace_id=trace_id, retrieval=40).spans)
    wait_for_verdicts(stack, [skewed, *burst[-3:]])
    return Traces(real, skewed, burst)


@pytest.fixture
def page(browser: Browser) -> Iterator[Browser]:
    browser.color_scheme("light")
    browser.errors()  # what earlier tests left
    yield browser
    assert browser.errors() == [], "console errors or failed requests on the page"


def shoot(browser: Browser, tmp_path: Path, name: str) -> Path:
    path = browser.screenshot(tmp_path / f"{name}.png")
    image = Image.open(path).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 150, f"{name}: a blank page has a handful of colours, not {len(colours)}"
    if SHOTS:
        shutil.copy(path, Path(SHOTS) / f"ui-{name}.png")
    return path


def has_colour(path: Path, rgb: tuple[int, int, int], tolerance: int = 10) -> bool:
    colours = Image.open(path).convert("RGB").getcolors(maxcolors=1 << 20) or []
    pixels = [c for _, c in colours if isinstance(c, tuple)]  # RGB: tuples, never ints
    return any(all(abs(c[i] - rgb[i]) <= tolerance for i in range(3)) for c in pixels)


def text(browser: Browser, selector: str = "main") -> str:
    return str(browser.eval(f"document.querySelector({selector!r}).innerText"))


# -- overview ---------------------------------------------------------------------------------


def test_overview_draws_every_stage_against_the_summary(
    page: Browser, stack: UiStack, traces: Traces, tmp_path: Path
) -> None:
    wait_until(
        lambda: any(r["state"] == "firing" for r in stack.api("/api/alerts")["rules"]),
        "the retrieval burst to fire an alert",
        timeout=30,
    )
    assert page.goto(stack.collector + "/?since=all") == 200
    shot = shoot(page, tmp_path, "overview")
    assert has_colour(shot, (0xDA, 0xFB, 0xE1))  # the green band behind the stages
    body = text(page)
    for stage in STAGES:
        assert stage in body
    summary = stack.api("/api/summary")
    assert f"{summary['traces']}\ntraces judged" in body
    # Each stage's p95 dot sits at its p95 (the summary's, over the same verdicts).
    drawn = page.eval(
        "Object.fromEntries([...document.querySelectorAll('svg.bands g.band-row')].map(g =>"
        " [g.dataset.stage, Number(g.querySelector('circle.p95').dataset.ms)]))"
    )
    for stage in summary["stages"]:
        assert drawn[stage["name"]] == pytest.approx(stage["p95_ms"], abs=0.006)
    assert drawn["TTFT"] == pytest.approx(summary["ttft"]["p95_ms"], abs=0.006)
    # The histogram holds every trace with a first token.
    counts = page.eval(
        "[...document.querySelectorAll('svg.histogram rect.bar')].map(r => Number(r.dataset.count))"
    )
    assert sum(counts) == summary["ttft"]["count"]
    # The firing alert and the latest overruns, with their blame.
    alerts = text(page, "#alerts")
    assert "retrieval" in alerts
    assert "page" in alerts
    overruns = text(page, "#overruns")
    assert traces.burst[-1] in overruns
    assert "retrieval +18.0 ms" in overruns  # 58 ms against its 40 ms limit
    # Slices sized to the traces (a minute or so of them), not to the range ("all").
    assert re.search(r"p95 per \d+ s slice", text(page, "#slices"))


def test_overview_refreshes_in_place(page: Browser, stack: UiStack, traces: Traces) -> None:
    page.goto(stack.collector + "/?since=all")
    page.eval("window.__sameDocument = true")
    before = stack.api("/api/summary")["traces"]
    extra = uuid.uuid4().hex
    _post(stack, rag_trace(trace_id=extra).spans)
    wait_for_verdicts(stack, [extra])
    page.wait(
        f"document.querySelector('.cards .big').textContent.trim() === '{before + 1}'",
        timeout_ms=20000,
    )
    assert page.eval("window.__sameDocument === true")  # no reload: the body was swapped
    assert int(page.eval("document.getElementById('overview').dataset.refreshes")) >= 1


def test_overview_of_one_run(page: Browser, stack: UiStack, traces: Traces) -> None:
    page.goto(f"{stack.collector}/?since=all&run_id={RUN_ID}")
    body = text(page)
    assert f"{len(traces.real)}\ntraces judged" in body
    assert f"in run {RUN_ID}" in body


def test_old_fragment_links_open_the_trace_page(
    page: Browser, stack: UiStack, traces: Traces
) -> None:
    page.goto(f"{stack.collector}/#{traces.real[0]}")
    page.wait("location.pathname.startsWith('/traces/')")
    assert page.eval("location.pathname") == f"/traces/{traces.real[0]}"


# -- trace list -------------------------------------------------------------------------------


def listed(browser: Browser) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = browser.eval(
        "[...document.querySelectorAll('#trace-list tbody tr')].map(r => ({id: r.dataset.traceId,"
        " status: r.dataset.status, blame: r.cells[5].innerText, run: r.cells[6].innerText}))"
    )
    return rows


def test_trace_list_filters_and_pages(
    page: Browser, stack: UiStack, traces: Traces, tmp_path: Path
) -> None:
    page.goto(stack.collector + "/traces")
    shoot(page, tmp_path, "traces")
    everything = listed(page)
    newest = [v["trace_id"] for v in stack.api("/api/verdicts", limit=50)]
    assert [r["id"] for r in everything] == newest
    assert page.eval("document.querySelectorAll('#trace-list svg.stack').length") == 50
    # Status: overruns only, as many as the API has on its first page.
    page.select("#f-status", "overrun")
    page.click("#trace-filters button[type=submit]")
    over = listed(page)
    assert over
    assert {r["status"] for r in over} == {"overrun"}
    assert [r["id"] for r in over] == [
        v["trace_id"] for v in stack.api("/api/verdicts", status="overrun", limit=50)
    ]
    # Run id: the load test's traces only, and all of them.
    page.goto(stack.collector + "/traces")
    page.fill("#f-run", RUN_ID)
    page.click("#trace-filters button[type=submit]")
    mine = listed(page)
    assert {r["run"] for r in mine} == {RUN_ID}
    assert sorted(r["id"] for r in mine) == sorted(traces.real)
    # Blamed stage.
    page.goto(stack.collector + "/traces?stage=retrieval")
    assert all("retrieval" in r["blame"] for r in listed(page))
    # Paging with the cursor: the next page starts right after this one.
    page.goto(stack.collector + "/traces")
    first = [r["id"] for r in listed(page)]
    page.click("#older")
    second = [r["id"] for r in listed(page)]
    assert second == [v["trace_id"] for v in stack.api("/api/verdicts", before=first[-1], limit=50)]
    assert not set(first) & set(second)


def test_a_link_in_the_list_opens_the_trace_page(
    page: Browser, stack: UiStack, traces: Traces
) -> None:
    page.goto(f"{stack.collector}/traces?run_id={RUN_ID}")
    href = page.eval("document.querySelector('#trace-list tbody a').getAttribute('href')")
    page.click("#trace-list tbody a")
    assert page.eval("location.pathname") == href
    assert page.eval("document.getElementById('verdict-status').textContent") in (
        "ok",
        "warn",
        "overrun",
        "error",
        "incomplete",
    )


def test_the_list_works_from_the_keyboard(page: Browser, stack: UiStack, traces: Traces) -> None:
    page.goto(stack.collector + "/traces")
    for _ in range(40):
        page.press("Tab")
        focused = page.focused()
        if focused and (focused.get("href") or "").startswith("/traces/"):
            break
    else:
        raise AssertionError("Tab never reached a trace link")
    page.press("Enter", navigates=True)
    assert page.eval("location.pathname") == focused["href"]


# -- trace page -------------------------------------------------------------------------------

GEOMETRY = """(() => {
  const wf = document.getElementById('waterfall');
  const at = (e, p) => e ? Number(e.style[p].replace('%', '')) : null;
  return {
    lo: Number(wf.dataset.loMs), hi: Number(wf.dataset.hiMs), view: wf.dataset.view,
    ftx: at(document.getElementById('first-token'), 'left'),
    greyx: at(wf.querySelector('.after-ft'), 'left'),
    cp: [...wf.querySelectorAll('.cp')].map(r => ({x: at(r, 'left'), w: at(r, 'width'),
         stage: r.closest('details').dataset.stage})),
    rows: [...wf.querySelectorAll('.span-row .wf-name')].map(t => t.textContent),
    skews: [...wf.querySelectorAll('.skew')].map(t => Number(t.dataset.shiftMs)),
  };
})()"""


def check_waterfall(browser: Browser, verdict: dict[str, Any]) -> dict[str, Any]:
    """The first-token line and the critical path are drawn where the verdict puts them:
    in percent of the window shown, x = (ms − lo) × 100 / (hi − lo)."""
    g = browser.eval(GEOMETRY)
    lo, k = g["lo"], 100 / (g["hi"] - g["lo"])
    ttft = verdict["ttft_ms"]
    assert g["view"] == "ttft"  # the default: the TTFT window fills the width
    assert lo == 0
    assert 0.9 * 100 <= ttft * k <= 100
    # Percentages carry three decimals; the verdict's ms two.
    assert g["ftx"] == pytest.approx((ttft - lo) * k, abs=0.002 + 0.006 * k)
    assert g["greyx"] == pytest.approx(g["ftx"], abs=0.002)  # greyed from the first token on
    segments = sorted(g["cp"], key=lambda s: s["x"])
    assert segments[0]["x"] == pytest.approx(0, abs=0.002)  # the path starts at t0 ...
    for a, b in itertools.pairwise(segments):  # ... runs without gaps ...
        assert b["x"] == pytest.approx(a["x"] + a["w"], abs=0.004)
    last = segments[-1]
    assert last["x"] + last["w"] == pytest.approx(g["ftx"], abs=0.004)  # ... to the first token
    for stage in verdict["stages"]:
        drawn = sum(s["w"] for s in segments if s["stage"] == stage["name"]) / k
        assert drawn == pytest.approx(stage["ms"] or 0.0, abs=0.05), stage["name"]
    return dict(g)


def test_trace_page_of_a_real_trace(
    page: Browser, stack: UiStack, traces: Traces, tmp_path: Path
) -> None:
    slowest = stack.report["slowest"][0]["trace_id"]
    verdict = stack.api(f"/api/verdicts/{slowest}")
    assert page.goto(f"{stack.collector}/traces/{slowest}") == 200
    shoot(page, tmp_path, "trace")
    body = text(page)
    assert verdict["status"] in text(page, "#verdict-line")
    for stage in STAGES:
        assert stage in body
    geometry = check_waterfall(page, verdict)
    # vLLM's request span is there with the phases the evaluator reads from it (the queue
    # only where the request waited for a step: at this rate it seldom does).
    labels = geometry["rows"]
    assert "llm_request" in labels
    assert {"vllm.frontend", "vllm.prefill", "vllm.decode"} <= set(labels)
    assert page.eval("document.getElementById('jaeger-link').href") == (
        f"{JAEGER_UI}/trace/{slowest}"
    )
    shown = page.eval("JSON.parse(document.getElementById('verdict-json').textContent)")
    assert shown["stages"] == verdict["stages"]
    assert shown["ttft_ms"] == verdict["ttft_ms"]
    # ... folded away: inside a closed <details>, taking no room on the page.
    folded = page.eval(
        "(() => { const pre = document.getElementById('verdict-json');"
        " const box = pre.closest('details');"
        " return {open: box ? box.open : null, shown: pre.checkVisibility(),"
        " h: box.getBoundingClientRect().height}; })()"
    )
    assert folded["open"] is False
    assert folded["shown"] is False
    assert folded["h"] < 40  # the one line of its summary
    # The budget bar: each stage's actual time drawn at its verdict's ms.
    actual = page.eval(
        "Object.fromEntries([...document.querySelectorAll('svg.budget g.stage-row')].map(g =>"
        " [g.dataset.stage, g.querySelector('rect.actual') ? "
        "Number(g.querySelector('rect.actual').dataset.ms) : null]))"
    )
    assert actual == {s["name"]: s["ms"] for s in verdict["stages"]}


def test_trace_page_marks_the_clock_skew_shift(
    page: Browser, stack: UiStack, traces: Traces, tmp_path: Path
) -> None:
    verdict = stack.api(f"/api/verdicts/{traces.skewed}")
    assert verdict["skew_adjusted_ms"] > 0
    page.goto(f"{stack.collector}/traces/{traces.skewed}")
    geometry = check_waterfall(page, verdict)
    assert [abs(s) for s in geometry["skews"]] == [pytest.approx(verdict["skew_adjusted_ms"])]
    assert "clock skew adjusted" in text(page, "#verdict-line")
    page.color_scheme("dark")
    page.goto(f"{stack.collector}/traces/{traces.skewed}")
    shot = shoot(page, tmp_path, "trace-dark")
    assert page.eval("getComputedStyle(document.body).backgroundColor") == "rgb(15, 18, 22)"
    assert has_colour(shot, (0x0F, 0x12, 0x16), tolerance=2)


BARS = """(() => {
  const wf = document.getElementById('waterfall');
  const track = wf.querySelector('.wf-rows .wf-track').getBoundingClientRect();
  const bars = {};
  for (const row of wf.querySelectorAll('details.span-row')) {
    const name = row.querySelector('.wf-name').textContent;
    const bar = row.querySelector('.bar');
    if (!(name in bars) && bar) bars[name] = {px: bar.getBoundingClientRect().width,
        ms: Number(row.dataset.endMs) - Number(row.dataset.startMs)};
  }
  const ft = document.querySelector('.wf-rows .ft');
  return {track: track.width, trackLeft: track.left, vw: window.innerWidth,
          lo: Number(wf.dataset.loMs), hi: Number(wf.dataset.hiMs), view: wf.dataset.view,
          ftx: ft ? ft.getBoundingClientRect().left - track.left : null, bars,
          scroll: document.scrollingElement.scrollWidth,
          font: Math.min(...[...document.querySelectorAll('.wf .wf-name, .wf-axis .tick')]
            .filter(e => e.offsetParent).map(e => parseFloat(getComputedStyle(e).fontSize)))};
})()"""
SMALL = ("gateway.validate", "auth.verify", "prompt.render")


@pytest.fixture
def narrow(page: Browser) -> Iterator[Browser]:
    """The page at a phone's width, 420 px; the usual 1,280 px again afterwards."""
    page.call("viewport", width=420, height=900)
    try:
        yield page
    finally:
        page.call("viewport", width=1280, height=900)


def measure(browser: Browser, width: int, url: str) -> dict[str, Any]:
    browser.call("viewport", width=width, height=900)
    assert browser.goto(url) == 200
    g: dict[str, Any] = browser.eval(BARS)
    scale = g["track"] / (g["hi"] - g["lo"])  # px per ms
    for name in SMALL:  # drawn to the window's scale (2 px at the least)
        bar = g["bars"][name]
        assert bar["px"] == pytest.approx(max(2.0, bar["ms"] * scale), abs=0.6), name
    return g


def test_the_ttft_window_fills_the_width_on_a_desktop_and_a_phone(
    page: Browser, stack: UiStack, traces: Traces, tmp_path: Path
) -> None:
    slowest = stack.report["slowest"][0]["trace_id"]
    verdict = stack.api(f"/api/verdicts/{slowest}")
    url = f"{stack.collector}/traces/{slowest}"
    try:
        wide = measure(page, 1400, url)
        shoot(page, tmp_path, "trace-1400")
        phone = measure(page, 420, url)
        shoot(page, tmp_path, "trace-420")
        whole = measure(page, 1400, url + "?view=whole")
    finally:
        page.call("viewport", width=1280, height=900)
    ttft = verdict["ttft_ms"]
    for g in (wide, phone):
        assert g["view"] == "ttft"
        # The first token sits at the right of the timeline, not in its first sixth.
        assert 0.9 * g["track"] <= g["ftx"] <= g["track"]
        assert g["ftx"] == pytest.approx(ttft / g["hi"] * g["track"], abs=1.5)
    assert wide["track"] >= 0.6 * wide["vw"]  # the timeline keeps most of the width ...
    assert phone["track"] >= 0.85 * phone["vw"]  # ... on a phone too: labels go above it
    assert phone["scroll"] <= phone["vw"]  # nothing runs off the side of the page
    assert phone["font"] >= 11  # text readable
    assert wide["font"] >= 11
    # Against the whole trace, the TTFT window's spans are as many times wider as the
    # trace is longer than its TTFT.
    gain = (whole["hi"] / wide["hi"]) * 0.95
    assert gain > 1.5, "a load-test trace streams on well past its first token"
    px_per_ms = {n: g["track"] / (g["hi"] - g["lo"]) for n, g in (("ttft", wide), ("whole", whole))}
    assert px_per_ms["ttft"] >= gain * px_per_ms["whole"]


def test_the_whole_trace_and_a_zoom_are_links_that_work_without_a_script(
    page: Browser, stack: UiStack, traces: Traces
) -> None:
    slowest = stack.report["slowest"][0]["trace_id"]
    verdict = stack.api(f"/api/verdicts/{slowest}")
    # Rendered on the server: the view is in the HTML itself.
    html = stack.client.get(f"/traces/{slowest}", params={"view": "whole"}).text
    assert 'data-view="whole"' in html
    page.goto(f"{stack.collector}/traces/{slowest}")
    page.click("#view-whole")
    g = page.eval(BARS)
    assert g["view"] == "whole"
    assert page.eval("location.search") == "?view=whole"
    assert g["hi"] > verdict["ttft_ms"]
    assert g["ftx"] == pytest.approx(verdict["ttft_ms"] / g["hi"] * g["track"], abs=1.5)
    page.click("#view-ttft")
    assert page.eval("document.getElementById('waterfall').dataset.view") == "ttft"
    # Zoom to a span from its row: it fills most of the width.
    auth = "details.span-row:has(.wf-name:text-is('auth.verify'))"
    page.click(f"{auth} > summary", navigates=False)
    page.click(f"{auth} .wf-zoom-span a")
    g = page.eval(BARS)
    assert g["view"] == "range"
    auth_ms = g["bars"]["auth.verify"]["ms"]
    # A margin of 15 % each side (less where the trace's start cuts it); a span under
    # 60 µs gets a 60 µs window.
    assert auth_ms < g["hi"] - g["lo"] <= max(auth_ms * 1.3, 0.06) + 0.002
    assert g["bars"]["auth.verify"]["px"] >= min(0.7, auth_ms / 0.06 * 0.9) * g["track"]
    # Zoom out from there: twice the width, about the same middle.
    before = g["hi"] - g["lo"]
    page.click("#zoom-out")
    g = page.eval(BARS)
    assert g["hi"] - g["lo"] == pytest.approx(2 * before, rel=0.01)
    page.click("#zoom-in")
    assert page.eval(BARS)["hi"] - page.eval(BARS)["lo"] == pytest.approx(before, rel=0.01)


def test_a_stage_link_zooms_to_its_first_stretch(
    page: Browser, stack: UiStack, traces: Traces
) -> None:
    # A trace of a known shape: the gateway checks the request (1 ms, 2 ms), then retrieval.
    page.goto(f"{stack.collector}/traces/{traces.skewed}")
    page.click(".zoom-stage[data-stage='gateway']")
    g = page.eval(BARS)
    assert g["view"] == "range"
    assert g["hi"] - g["lo"] < 10
    for name in ("gateway.validate", "auth.verify"):
        assert g["bars"][name]["px"] >= 0.1 * g["track"], name
    # The minimap's pieces are links too: its prompt piece zooms on prompt.render.
    page.click("#wf-minimap a[aria-label^='zoom to prompt']")
    g = page.eval(BARS)
    assert g["bars"]["prompt.render"]["px"] >= 0.5 * g["track"]


def test_dragging_across_the_minimap_zooms(page: Browser, stack: UiStack, traces: Traces) -> None:
    slowest = stack.report["slowest"][0]["trace_id"]
    page.goto(f"{stack.collector}/traces/{slowest}")
    total = float(page.eval("Number(document.getElementById('wf-minimap').dataset.durationMs)"))
    page.eval(
        """(() => {
      const strip = document.getElementById('wf-minimap');
      const box = strip.getBoundingClientRect();
      const y = box.top + box.height / 2;
      const opts = (f) => ({bubbles: true, button: 0, clientX: box.left + f * box.width,
                            clientY: y, pointerId: 1});
      strip.dispatchEvent(new PointerEvent('pointerdown', opts(0.1)));
      window.dispatchEvent(new PointerEvent('pointermove', opts(0.2)));
      window.dispatchEvent(new PointerEvent('pointerup', opts(0.3)));
      return true;
    })()"""
    )
    page.wait("document.getElementById('waterfall')?.dataset.view === 'range'")
    g = page.eval(BARS)
    assert g["lo"] == pytest.approx(0.1 * total, rel=0.02)
    assert g["hi"] == pytest.approx(0.3 * total, rel=0.02)


def test_a_click_on_a_span_shows_its_attributes(
    page: Browser, stack: UiStack, traces: Traces
) -> None:
    slowest = stack.report["slowest"][0]["trace_id"]
    page.goto(f"{stack.collector}/traces/{slowest}")
    for name, key in (
        ("prompt.render", "gen_ai.usage.input_tokens"),
        ("llm_request", "gen_ai.usage.prompt_tokens"),
    ):
        row = f"details.span-row:has(.wf-name:text-is('{name}'))"
        select = (
            "[...document.querySelectorAll('details.span-row')]"
            f".find(d => d.querySelector('.wf-name').textContent === {name!r})"
        )
        assert page.eval(f"{select}.open") is False
        page.click(f"{row} > summary", navigates=False)
        panel = page.eval(
            f"(() => {{ const d = {select}; return {{open: d.open,"
            " text: d.querySelector('.span-attrs').innerText,"
            " h: d.querySelector('.span-attrs').getBoundingClientRect().height}; })()"
        )
        assert panel["open"] is True
        assert panel["h"] > 0
        assert re.search(rf"{re.escape(key)}\s+\d+", panel["text"]), panel["text"]


def test_a_phone_gets_a_page_that_fits(narrow: Browser, stack: UiStack, traces: Traces) -> None:
    narrow.goto(f"{stack.collector}/traces/{traces.skewed}")
    fit = narrow.eval(
        """(() => {
      const wide = (e) => e.scrollWidth > e.clientWidth + 1;
      const budget = document.querySelector('svg.budget');
      return {scroll: document.scrollingElement.scrollWidth, vw: window.innerWidth,
        tables: [...document.querySelectorAll('.trace-page table')].map(t => {
          const box = t.parentElement;
          return {scrolls: getComputedStyle(box).overflowX,
                  inside: box.getBoundingClientRect().right <= window.innerWidth + 0.5,
                  wide: wide(box)}; }),
        budgetScale: budget.getBoundingClientRect().width / budget.viewBox.baseVal.width};
    })()"""
    )
    assert fit["scroll"] <= fit["vw"]
    assert fit["tables"]
    for table in fit["tables"]:  # each table scrolls inside its own box, if at all
        assert table["scrolls"] == "auto"
        assert table["inside"]
    assert fit["budgetScale"] >= 0.8  # its 11 px text drawn at 9 px or more
    skews = narrow.eval("[...document.querySelectorAll('.wf .skew')].map(e => e.offsetWidth)")
    assert len(skews) == 1
    assert skews[0] > 0


# -- load-test run ----------------------------------------------------------------------------


def test_run_page_has_the_numbers_of_report_json(
    page: Browser, stack: UiStack, traces: Traces, tmp_path: Path
) -> None:
    page.goto(stack.collector + "/runs")
    page.click(f"#runs a[href='/runs/{RUN_ID}']")
    shoot(page, tmp_path, "run")
    report = stack.report
    cells = page.eval(
        "Object.fromEntries([...document.querySelectorAll('#run-stages tbody tr')].map(r =>"
        " [r.dataset.stage, Object.fromEntries([...r.querySelectorAll('td[data-q]')].map(c =>"
        " [c.dataset.q, c.dataset.value === 'None' ? null : Number(c.dataset.value)]))]))"
    )
    for name, summary in [*((s["name"], s) for s in report["stages"]), ("TTFT", report["ttft"])]:
        for q in ("p50", "p90", "p95", "p99", "max"):
            value = summary[f"{q}_ms"]
            if value is None:  # nothing measured: the cell says so
                assert cells[name][q] is None, (name, q)
            else:
                assert cells[name][q] == pytest.approx(value, rel=1e-12), (name, q)
    body = text(page)
    assert f"{report['slo']['within_limits'] * 100:.1f}%" in body
    for status, count in report["verdicts"]["by_status"].items():
        assert f"{status} {count}" in body
    slowest = page.eval("[...document.querySelectorAll('#run-slowest a')].map(a => a.textContent)")
    assert slowest == [s["trace_id"] for s in report["slowest"]]
    page.click("#run-slowest a")
    assert page.eval("location.pathname") == f"/traces/{report['slowest'][0]['trace_id']}"
