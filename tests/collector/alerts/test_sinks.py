"""Re-sends of a firing alert go to Alertmanager only: the webhook and the log get each
change of state once, however long the alert fires."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from spanbudget.collector.alerts.engine import Alert, AlertEngine, AlertSettings
from spanbudget.collector.alerts.sinks import Dispatcher, LogSink, WebhookSink
from spanbudget.collector.budget.loader import load_budget

from tests.collector.alerts.alertmanager import WebhookReceiver
from tests.collector.alerts.recording import Segment, replay
from tests.support.servers import wait_until

REPO = Path(__file__).resolve().parents[3]
BUDGET = load_budget(REPO / "budget.yaml").budget


def test_the_webhook_and_the_log_get_one_firing_and_one_resolved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1_800_000_000.0]
    with WebhookReceiver() as hook:
        dispatcher = Dispatcher([WebhookSink(hook.url), LogSink()])
        sent: list[Alert] = []

        def send(alert: Alert) -> None:
            sent.append(alert)
            dispatcher.send(alert)

        # Re-sent every minute while firing: the page fires for about 35 minutes.
        settings = AlertSettings(resend_s=60)
        engine = AlertEngine(BUDGET, send, settings, clock=lambda: now[0])
        start = now[0]
        with caplog.at_level(logging.WARNING, logger="spanbudget.collector.alerts.sinks"):
            segments = (Segment(20 * 60, retrieval_extra_ms=30), Segment(3600))
            for second, verdicts in replay(BUDGET, segments):
                now[0] = start + second
                engine.on_verdicts(verdicts)
                wait_until(lambda: dispatcher.pending() == 0, what="delivery")
            dispatcher.close()
        pages = [a for body in hook.bodies() for a in body["alerts"]]
    assert sum(1 for a in sent if a.resent) > 10  # the re-sends were made
    assert [(a["status"], a["labels"]["severity"]) for a in pages] == [
        ("firing", "page"),
        ("resolved", "page"),
    ]
    logged = [
        r.getMessage().split(" {")[0]
        for r in caplog.records
        if r.name == "spanbudget.collector.alerts.sinks"
    ]
    assert logged == ["ALERT FIRING", "ALERT RESOLVED"]
