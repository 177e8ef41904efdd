"""Where the budget goes, in the live collector: the verdict columns give the shares the
pure core gives on the same verdicts; `/api/share` serves them for a window or a run; the
overview shows them, with the sentence and both shares over time."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.live.app import app_for
from spanbudget.collector.live.pipeline import assemble
from spanbudget.collector.live.settings import CollectorSettings
from spanbudget.collector.sinks.store import VerdictStore
from spanbudget.collector.stats import UNATTRIBUTED, BudgetShare, Slices, share_of
from spanbudget.collector.ui.columns import VerdictColumns
from spanbudget.collector.ui.overview import period_text

from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
BUDGET_PATH = REPO / "budget.yaml"
BUDGET = load_budget(BUDGET_PATH).budget
NAMES = BUDGET.stage_names()
NOW = time.time()
COUNT = 240


def made(count: int = COUNT) -> list[Verdict]:
    """Over the last hour, in two runs: retrieval slow in the second half (it takes the
    blame there), prefill slow now and then all along; some server-only and incomplete."""
    evaluator = Evaluator(BUDGET)
    out = []
    for i in range(count):
        late = i >= count // 2
        spans = rag_trace(
            trace_id=f"{i + 1:032x}",
            retrieval=(30 + i % 20) if late and i % 3 else i % 10,
            prefill=(i * 11) % 40,
            client_root=i % 4 != 0,
            marks=i % 17 != 0,
        ).spans
        at = datetime.fromtimestamp(NOW - 3600 + i * 3600 / count, UTC)
        verdict = evaluator.evaluate(spans, evaluated_at=at)
        assert verdict is not None
        run = "share-late" if late else "share-early"
        out.append(replace(verdict, attributes={**verdict.attributes, "loadtest.run_id": run}))
    return out


VERDICTS = made()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("share") / "verdicts.db"
    store = VerdictStore(path, retention_seconds=86400, retention_count=10**6)
    store.write([(v, 12) for v in VERDICTS])
    store.close()
    return path


@pytest.fixture(scope="module")
def client(db: Path) -> Iterator[TestClient]:
    settings = CollectorSettings.from_flat(db_path=db, budget_path=BUDGET_PATH, grpc_listen="off")
    pipeline = assemble(settings, BUDGET, alerts=False)  # not started: nothing writes
    try:
        with TestClient(app_for(pipeline)) as test_client:
            yield test_client
    finally:
        pipeline.close()


def same(ours: BudgetShare, theirs: BudgetShare) -> None:
    assert (ours.traces, ours.overruns) == (theirs.traces, theirs.overruns)
    assert ours.ttft_ms == pytest.approx(theirs.ttft_ms, rel=1e-12)
    for a, b in zip(ours.stages, theirs.stages, strict=True):
        assert a.name == b.name
        assert a.ms == pytest.approx(b.ms, rel=1e-12, abs=1e-9)
        assert (a.measured, a.blamed) == (b.measured, b.blamed)


def test_the_columns_give_the_shares_the_verdicts_give(db: Path) -> None:
    columns = VerdictColumns(db)
    try:
        since = NOW - 1795
        selection = columns.select(since=since)
        slices = Slices(since - since % 600, 600.0, 4, per_slice=1)
        ours = selection.share(NAMES, slices)
        kept = [v for v in VERDICTS if v.evaluated_at.timestamp() >= since]
        same(ours, share_of(kept, names=NAMES))
        assert ours.overruns > 20
        lead = ours.leading()
        assert lead is not None
        assert lead.name == "retrieval"
        assert [s.traces for s in ours.slices] == [
            s.traces for s in share_of(kept, names=NAMES, slices=slices).slices
        ]
        same(
            columns.select(run_id="share-early").share(NAMES), share_of(VERDICTS[:120], names=NAMES)
        )
    finally:
        columns.close()


def get(client: httpx.Client, path: str, **params: Any) -> Any:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_api_share_for_a_window_a_run_and_their_slices(client: httpx.Client) -> None:
    everything = get(client, "/api/share", since="all")
    assert everything["budget"] == BUDGET.name
    assert [s["name"] for s in everything["stages"]] == [*NAMES, UNATTRIBUTED]
    assert sum(s["time_share"] for s in everything["stages"]) == pytest.approx(1.0)
    timed = [v for v in VERDICTS if v.ttft_ms is not None]
    assert everything["traces"] == len(timed)
    assert everything["overruns"] == sum(1 for v in VERDICTS if v.status.value == "overrun")
    assert 1 <= len(everything["slices"]) <= 37
    assert sum(s["traces"] for s in everything["slices"]) == everything["traces"]
    # The second half of the hour, given as RFC 3339 bounds; then one run by its id.
    since = datetime.fromtimestamp(NOW - 1795, UTC).isoformat()
    until = datetime.fromtimestamp(NOW + 60, UTC).isoformat()
    late = get(client, "/api/share", since=since, until=until, slices=4)
    kept = [v for v in VERDICTS if v.evaluated_at.timestamp() >= NOW - 1795]
    assert late["traces"] == sum(1 for v in kept if v.ttft_ms is not None)
    assert 1 <= len(late["slices"]) <= 5
    retrieval = late["stages"][NAMES.index("retrieval")]
    assert retrieval["blame_share"] > 0.5
    low, high = retrieval["blame_interval"]
    assert low < retrieval["blame_share"] < high
    run = get(client, "/api/share", run_id="share-early", slices=0)
    assert run["slices"] == []
    assert run["slice_width_s"] is None
    assert run["traces"] == sum(1 for v in VERDICTS[:120] if v.ttft_ms is not None)
    nothing = get(client, "/api/share", run_id="no-such-run")
    assert nothing["traces"] == 0
    assert nothing["stages"][0]["time_share"] is None
    assert client.get("/api/share", params={"since": "yesterday-ish"}).status_code == 400
    assert client.get("/api/share", params={"slices": -1}).status_code == 422
    # /api/summary keeps its keys.
    assert set(get(client, "/api/summary")) == {
        "traces",
        "status_counts",
        "ttft",
        "stages",
        "percentile_method",
        "budget",
    }


def test_the_overview_says_where_the_budget_goes(client: httpx.Client) -> None:
    api = get(client, "/api/share", since="all")
    html = client.get("/", params={"since": "all"}).text
    body = client.get("/overview/body", params={"since": "all"}).text
    assert 'id="budget-share"' in html
    assert 'id="budget-share"' in body
    sentence = re.search(r'id="share-sentence">([^<]*)<', html)
    assert sentence is not None
    lead = max(api["stages"], key=lambda s: s["blamed"])
    said = (
        f"In everything kept, {lead['name']} took {lead['time_share'] * 100:.0f} % of the time"
        f" to first token and {lead['blame_share'] * 100:.0f} % of the blame"
    )
    assert sentence.group(1).startswith(said), sentence.group(1)
    # One row a stage and unattributed, in the table and in the bars, with the API's shares.
    table = re.search(r'<table class="num" id="share-table">.*?</table>', html, re.S)
    assert table is not None
    for row in api["stages"]:
        found = rf'<tr data-stage="{row["name"]}"><th scope="row">.*?</tr>'
        cells = re.search(found, table.group(0), re.S)
        assert cells is not None, row["name"]
        assert f"{row['time_share'] * 100:.1f}%" in cells.group(0)
        assert f'<g class="share-row" data-stage="{row["name"]}">' in html
    # Both shares over time: a panel per stage that holds any, with a blame line.
    panels = re.search(r'<svg class="chart panels share-panels".*?</svg>', html, re.S)
    assert panels is not None
    assert panels.group(0).count('<g class="panel"') >= 2
    assert 'class="line blame"' in panels.group(0)
    one_run = client.get("/", params={"since": "all", "run_id": "share-late"}).text
    assert "In run share-late, retrieval took" in one_run


@pytest.mark.parametrize(
    ("since", "run_id", "said"),
    [
        ("15m", None, "in the last 15 min"),
        ("1h", None, "in the last hour"),
        ("7d", None, "in the last 7 days"),
        ("all", None, "in everything kept"),
        ("90m", None, "in the last 90m"),
        ("2026-12-01T00:00:00Z", None, "since 2026-12-01T00:00:00Z"),
        ("1h", "r-1", "in run r-1"),
    ],
)
def test_the_period_of_the_sentence(since: str, run_id: str | None, said: str) -> None:
    assert period_text(since, run_id) == said
