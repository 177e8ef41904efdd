"""One budget at a time: a collector that judges the reference path by the budget in
effect and an OpenInference app by its preset shows each against its own stages and
limits, in the overview and in `/api/summary`, never the two pooled."""

from __future__ import annotations

import re
from pathlib import Path

from spanbudget.collector.budget.loader import load_budget, load_preset
from spanbudget.collector.intake.otlp import PROTOBUF

from tests.support.collector import BUDGET, Collector, running_collector
from tests.support.otlp import to_request
from tests.support.traces import openinference_trace, rag_trace

OURS = load_budget(BUDGET).budget
THEIRS = load_preset("openinference").budget
PRESET = THEIRS.name


def send(collector: Collector, reference: int, openinference: int, first: int = 1) -> None:
    """`reference` traces of the reference path, then `openinference` of the app, each
    judged before this returns."""
    ids = [f"{first + n:032x}" for n in range(reference + openinference)]
    spans = [s for trace_id in ids[:reference] for s in rag_trace(trace_id=trace_id).spans]
    for trace_id in ids[reference:]:
        spans += openinference_trace(trace_id, retrieval=40).spans
    answer = collector.post(to_request(spans).SerializeToString(), PROTOBUF)
    assert answer.status_code == 200
    for trace_id in ids:
        collector.verdict(trace_id)


def stages_shown(html: str) -> list[str]:
    """The stage rows of the overview's table, in order."""
    table = html.split('id="h-stages"', 1)[-1].split("</table>", 1)[0]
    return re.findall(r'<tr data-stage="([^"]+)">', table)


def listed_ids(html: str) -> set[str]:
    """The trace ids the trace list shows."""
    table = html.split('<table id="trace-list">', 1)[-1].split("</table>", 1)[0]
    return set(re.findall(r'href="/traces/([0-9a-f]{32})"', table))


def traces_shown(html: str) -> int:
    return int(re.search(r'<div class="big">(\d+)</div>\s*<div>traces judged', html)[1])  # type: ignore[index]


def test_the_overview_shows_one_budgets_verdicts_against_its_own_stages(tmp_path: Path) -> None:
    with running_collector(tmp_path) as collector:
        send(collector, reference=4, openinference=6)
        mine = collector.client.get("/overview/body", params={"since": "all"}).text
        assert stages_shown(mine) == [s.name for s in OURS.stages]
        assert traces_shown(mine) == 4
        budgets = re.search(r'<p id="budgets">(.*?)</p>', mine, re.S)
        assert budgets is not None
        assert f"<strong>{OURS.name}</strong> (4 traces)" in budgets[1]
        assert f'budget={PRESET}">{PRESET}</a> (6 traces)' in budgets[1]
        theirs = collector.client.get(
            "/overview/body", params={"since": "all", "budget": PRESET}
        ).text
        assert stages_shown(theirs) == [s.name for s in THEIRS.stages]
        assert traces_shown(theirs) == 6
        assert f"(the budget in effect is {OURS.name})" in theirs
        ttft_row = theirs.split('<tr class="total" data-stage="TTFT">', 1)[1].split("</tr>", 1)[0]
        assert "<td>1,000</td>" in ttft_row  # the preset's TTFT limit, not 250
        assert f'href="/traces?stage=retrieval&amp;budget={PRESET}"' in theirs
        listed = collector.client.get("/traces", params={"budget": PRESET}).text
        assert len(listed_ids(listed)) == 6
        assert "<option>llm</option>" in listed  # the preset's stages to filter by
        assert len(listed_ids(collector.client.get("/traces").text)) == 10
        page = collector.client.get("/", params={"budget": PRESET}).text
        assert f'<input type="hidden" name="budget" value="{PRESET}">' in page
        assert f"budget={PRESET}" in page  # the in-place refresh keeps it


def test_with_none_of_the_budget_in_effects_traces_it_shows_the_one_that_judged(
    tmp_path: Path,
) -> None:
    with running_collector(tmp_path) as collector:
        send(collector, reference=0, openinference=3)
        html = collector.client.get("/overview/body", params={"since": "all"}).text
        assert stages_shown(html) == [s.name for s in THEIRS.stages]
        assert traces_shown(html) == 3


def test_the_share_takes_one_budget_by_its_own_stages(tmp_path: Path) -> None:
    with running_collector(tmp_path) as collector:
        send(collector, reference=3, openinference=4)
        pooled = collector.client.get("/api/share", params={"since": "all"}).json()
        assert (pooled["budget"], pooled["traces"]) == (OURS.name, 7)
        one = collector.client.get("/api/share", params={"since": "all", "budget": PRESET})
        share = one.json()
        assert (share["budget"], share["traces"]) == (PRESET, 4)
        names = [s["name"] for s in share["stages"]]
        assert names == [*(s.name for s in THEIRS.stages), "unattributed"]
        llm = next(s for s in share["stages"] if s["name"] == "llm")
        assert llm["time_share"] > 0.5  # 100 of each 150 ms


def test_the_summary_takes_one_budget(tmp_path: Path) -> None:
    with running_collector(tmp_path) as collector:
        send(collector, reference=2, openinference=5)
        pooled = collector.client.get("/api/summary").json()
        assert (pooled["budget"], pooled["traces"]) == (OURS.name, 7)
        one = collector.client.get("/api/summary", params={"budget": PRESET}).json()
        assert (one["budget"], one["traces"]) == (PRESET, 5)
        assert {s["name"] for s in one["stages"]} <= {s.name for s in THEIRS.stages}
        assert "llm" in {s["name"] for s in one["stages"]}
        assert "prefill" not in {s["name"] for s in one["stages"]}
