"""A firing alert survives a restart of `spanbudget collect`, graceful or `kill -9`: the
rules' windows refill from the stored verdicts and their states come back from the saved
alert state, so the page neither resolves nor fires a second time (as Prometheus restores
`ALERTS_FOR_STATE`)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.collector.alerts.alertmanager import WebhookReceiver
from tests.deploy.processes import spanbudget_command, start_process, stop_process
from tests.support.otlp import to_request
from tests.support.servers import free_port, wait_until
from tests.support.traces import rag_trace

# 1h -> 10 s, 5m -> 0.83 s, for 2m -> 0.33 s; 6h -> 60 s, 30m -> 5 s, for 15m -> 2.5 s.
SCALE = 1 / 360


class Overruns:
    """Retrieval overruns sent every 0.1 s from a thread, through restarts (a refused
    connection while the collector is down is skipped, as a client that gives up would)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Overruns:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.wait(0.1):
                spans = [
                    s
                    for i in range(3)
                    for s in rag_trace(trace_id=f"{self.sent + i + 1:032x}", retrieval=30).spans
                ]
                try:
                    client.post(
                        f"{self.url}/v1/traces",
                        content=to_request(spans).SerializeToString(),
                        headers={"Content-Type": "application/x-protobuf"},
                    )
                except httpx.TransportError:
                    continue
                self.sent += 3


def page_notifications(receiver: WebhookReceiver) -> list[tuple[str, str]]:
    """(status, startsAt) of every notification of retrieval's page, in order."""
    return [
        (alert["status"], alert["startsAt"])
        for body in receiver.received
        for alert in body["alerts"]
        if alert["labels"]["stage"] == "retrieval" and alert["labels"]["severity"] == "page"
    ]


@pytest.mark.timing  # the burn must outlast the restart: windows of seconds, scaled
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_firing_page_stays_one_page_across_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: str
) -> None:
    monkeypatch.setenv("SPANBUDGET_COLLECTOR_ALERT_TICK_SECONDS", "0.05")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with WebhookReceiver() as receiver:
        command = spanbudget_command(
            "collect",
            *("--listen", f"127.0.0.1:{port}"),
            *("--grpc-listen", "off"),  # not the shared default port
            *("--db", str(tmp_path / "verdicts.db")),
            *("--webhook", receiver.url),
            *("--alert-window-scale", repr(SCALE)),
            *("--decision-wait", "0.2s"),
        )
        first = start_process(command, f"{url}/healthz", tmp_path / "first.log")
        with Overruns(url):
            try:
                wait_until(lambda: page_notifications(receiver), "the page firing", timeout=30)
                # Burning long enough for the slow page (for 2.5 s) to fire too, as a
                # real burn would be by the time someone restarts the collector.
                time.sleep(3.5)
            finally:
                if stop == "SIGKILL":
                    first.send_signal(signal.SIGKILL)
                    first.wait(10)
                else:
                    stop_process(first)
            assert (tmp_path / "verdicts.alerts.json").exists()
            before = page_notifications(receiver)
            second = start_process(command, f"{url}/healthz", tmp_path / "second.log")
            try:
                time.sleep(4.0)  # past every `for` and hold the fast page has
                firing = [
                    r
                    for r in httpx.get(f"{url}/api/alerts").json()["rules"]
                    if r["state"] == "firing"
                ]
            finally:
                stop_process(second)
    assert before[:1] == [("firing", before[0][1])]
    assert page_notifications(receiver) == before[:1], "paged again or resolved on restart"
    assert {r["stage"] for r in firing} >= {"retrieval"}
    assert "alert state restored: 1 firing alert" in (tmp_path / "second.log").read_text()
