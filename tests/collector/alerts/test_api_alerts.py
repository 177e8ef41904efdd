"""`GET /api/alerts` on a running collector: each rule's state, its burn in both windows and
the traces that drove it, as spans arrive over OTLP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from spanbudget.collector.budget.loader import load_budget

from tests.support.collector import running_collector
from tests.support.otlp import to_request
from tests.support.servers import wait_until
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
BUDGET = load_budget(REPO / "budget.yaml").budget
# The collector's alert settings: 1h -> 10 s, 5m -> 0.83 s, for 2m -> 0.33 s; 6h -> 60 s,
# 30m -> 5 s, for 15m -> 2.5 s.
ALERTS: dict[str, Any] = {"alerts": True, "alert_window_scale": 1 / 360, "alert_tick_seconds": 0.05}


def send(url: str, start: int, count: int, **extra: float) -> list[str]:
    ids = [f"{i:032x}" for i in range(start, start + count)]
    spans = [s for trace_id in ids for s in rag_trace(trace_id=trace_id, **extra).spans]
    response = httpx.post(
        f"{url}/v1/traces",
        content=to_request(spans).SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert response.status_code == 200, response.text
    return ids


def rules(url: str, **params: str) -> dict[tuple[str, str], dict[str, Any]]:
    response = httpx.get(f"{url}/api/alerts", params=params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["budget"] == "rag-ttft"
    return {(r["stage"], r["rule"]): r for r in body["rules"]}


def test_rules_go_pending_then_firing_with_their_burns_and_traces(tmp_path: Path) -> None:
    with running_collector(tmp_path, **ALERTS) as collector:
        before = rules(collector.url)
        assert len(before) == (len(BUDGET.stages) + 1) * 3
        assert {r["state"] for r in before.values()} == {"inactive"}
        slow = before[("retrieval", "6x over 1m and 5s")]
        assert (slow["for"], slow["keep_firing_for"], slow["severity"]) == (
            "2.5s",
            "2.5s",
            "page",
        )

        bad = send(collector.url, 1, 30, retrieval=30)  # retrieval 48 ms > 40
        wait_until(
            lambda: rules(collector.url)[("retrieval", "6x over 1m and 5s")]["state"] == "pending",
            what="the slow page pending",
        )
        pending = rules(collector.url, state="pending")[("retrieval", "6x over 1m and 5s")]
        assert pending["burning"] is True
        assert pending["since"] is not None
        assert pending["fires_at"] > pending["since"]
        assert pending["windows"]["long"] == {
            "window": "1m",
            "burn_rate": 20.0,
            "judged": 30,
            "over_limit": 30,
        }
        assert pending["windows"]["short"]["burn_rate"] == 20.0
        assert set(pending["trace_ids"]) <= set(bad)
        assert len(pending["trace_ids"]) == 5

        wait_until(
            lambda: ("retrieval", "6x over 1m and 5s") in rules(collector.url, state="firing"),
            what="the slow page firing",
        )
        firing = rules(collector.url, state="firing")
        assert {stage for stage, _ in firing} == {"retrieval"}
        assert {r["state"] for r in firing.values()} == {"firing"}
        assert ("prefill", "6x over 1m and 5s") not in firing


def test_without_alert_rules_it_is_404_and_a_bad_state_is_422(tmp_path: Path) -> None:
    with running_collector(tmp_path) as collector:
        assert httpx.get(f"{collector.url}/api/alerts").status_code == 404
    with running_collector(tmp_path, **ALERTS) as collector:
        answer = httpx.get(f"{collector.url}/api/alerts", params={"state": "burning"})
        assert answer.status_code == 422
