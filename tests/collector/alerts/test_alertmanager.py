"""Alerts end to end: spans over OTLP into a running collector, burn-rate pages into a real
Alertmanager (Debian's, started here on 127.0.0.1), retried while it is down."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from spanbudget.collector.budget.loader import load_budget

from tests.collector.alerts.alertmanager import Alertmanager
from tests.support.collector import running_collector
from tests.support.otlp import to_request
from tests.support.servers import wait_until
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
BUDGET = load_budget(REPO / "budget.yaml").budget
PROTOBUF = "application/x-protobuf"


@pytest.fixture
def alertmanager(debian_binary: Callable[[str], str], tmp_path: Path) -> Iterator[Alertmanager]:
    manager = Alertmanager(debian_binary("prometheus-alertmanager"), tmp_path)
    manager.start()
    try:
        yield manager
    finally:
        manager.stop()


def send_traces(url: str, start: int, count: int, **extra: float) -> list[str]:
    ids = [f"{i:032x}" for i in range(start, start + count)]
    spans = [s for trace_id in ids for s in rag_trace(trace_id=trace_id, **extra).spans]
    response = httpx.post(
        f"{url}/v1/traces",
        content=to_request(spans).SerializeToString(),
        headers={"Content-Type": PROTOBUF},
    )
    assert response.status_code == 200, response.text
    return ids


# The collector's alert settings, as `spanbudget collect` takes them.
ALERTS: dict[str, Any] = {
    "alerts": True,
    "alert_window_scale": 1 / 360,  # 1 h -> 10 s, 5 m -> 0.83 s
    "alert_min_traces": 5,
    "alert_resend_seconds": 1.0,
    "alert_tick_seconds": 0.1,
    "public_url": "http://127.0.0.1:4318",
    "jaeger_ui": "http://127.0.0.1:16686",
}


def test_retrieval_overruns_page_once_and_resolve(
    alertmanager: Alertmanager, tmp_path: Path
) -> None:
    with running_collector(tmp_path, alertmanager=alertmanager.url, **ALERTS) as collector:
        bad = send_traces(collector.url, 1, 30, retrieval=30)  # retrieval 48 ms > 40
        wait_until(lambda: alertmanager.alerts(severity="page") != [], what="the page")
        time.sleep(1.5)  # a re-send or two must not add alerts
        pages = alertmanager.alerts(severity="page")
        assert len(pages) == 1
        page = pages[0]
        assert page["labels"] == {
            "alertname": "SpanbudgetBudgetBurn",
            "budget": "rag-ttft",
            "stage": "retrieval",
            "severity": "page",
        }
        assert page["status"]["state"] == "active"
        notes = page["annotations"]
        assert float(notes["burn_rate"]) == pytest.approx(20.0)
        # The 14.4x rule (1 h/5 m, scaled) fires first; once its short window has moved
        # past the burst, the 6x rule (6 h/30 m) keeps the same page up.
        assert notes["windows"] in ("10s/0.833333s", "1m/5s")
        assert (notes["p95_ms"], notes["limit_ms"]) == ("48.0", "40")
        examples = notes["example_trace_ids"].split()
        assert len(examples) == 5
        assert set(examples) <= set(bad)
        assert f"http://127.0.0.1:16686/trace/{examples[0]}" in notes["trace_links"]
        assert page["generatorURL"] == "http://127.0.0.1:4318"
        # No other stage alerts.
        assert {a["labels"]["stage"] for a in alertmanager.alerts()} == {"retrieval"}

        # The overruns stop: good traffic for longer than the short window resolves it.
        for i in range(12):
            send_traces(collector.url, 1000 + i * 5, 5)
            time.sleep(0.15)
        wait_until(
            lambda: alertmanager.alerts(severity="page") == [],
            what="the page to resolve",
        )


def test_sends_are_retried_while_alertmanager_is_down(
    alertmanager: Alertmanager, tmp_path: Path
) -> None:
    with running_collector(tmp_path, alertmanager=alertmanager.url, **ALERTS) as collector:
        alertmanager.stop()
        send_traces(collector.url, 1, 30, retrieval=30)

        def failures(sink: str) -> float:
            return collector.metric("spanbudget_export_failures_total", sink=sink)

        wait_until(lambda: failures("alertmanager") >= 2, what="failed sends")
        assert failures("log") == failures("webhook") == 0
        alertmanager.start()
        wait_until(lambda: alertmanager.alerts(severity="page") != [], what="the late page")
        assert alertmanager.alerts(severity="page")[0]["labels"]["stage"] == "retrieval"


class _Webhook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_late_and_duplicate_spans_never_alert_twice(tmp_path: Path) -> None:
    handler = type("Hook", (_Webhook,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    webhook = f"http://127.0.0.1:{server.server_address[1]}/hook"
    try:
        with running_collector(
            tmp_path, webhook=webhook, **{**ALERTS, "alert_resend_seconds": 3600}
        ) as collector:
            bad = send_traces(collector.url, 1, 20, retrieval=30)
            wait_until(lambda: handler.received != [], what="the webhook")
            for trace_id in bad[:5]:
                collector.verdict(trace_id)

            def pages(status: str) -> list[dict[str, Any]]:
                return [
                    a
                    for body in list(handler.received)
                    for a in body["alerts"]
                    if a["status"] == status and a["labels"]["severity"] == "page"
                ]

            # Let the page resolve first: while it fires, a second burn could not show.
            wait_until(lambda: pages("resolved") != [], timeout=20, what="the page to resolve")
            # The same spans again (duplicates, late spans of decided traces), twice over:
            # were they judged again, 20 overruns in the short window would page anew.
            for _ in range(2):
                send_traces(collector.url, 1, 20, retrieval=30)
            time.sleep(1.5)
            firing = pages("firing")
            assert len(firing) == 1
            assert firing[0]["labels"]["stage"] == "retrieval"
            assert collector.metric("spanbudget_spans_late_total") > 0
    finally:
        server.shutdown()
        server.server_close()
