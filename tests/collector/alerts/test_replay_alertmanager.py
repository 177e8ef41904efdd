"""Recorded verdicts replayed through the alert engine on the default rules into a real
Alertmanager (Debian's), whose webhook notifications are counted exactly: a cold-start
blip notifies no one, a sustained burn notifies once firing and once resolved.

The engine runs on a clock that replays hours of traffic in seconds, set in the past so
that Alertmanager, on the real clock, takes every `endsAt` of a resolved alert as over.
Before each change of state moves on, the replay waits until Alertmanager has notified
it, as hours between them would let it in real life.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from spanbudget.collector.alerts.burnrate import DEFAULT_RULES
from spanbudget.collector.alerts.engine import Alert, AlertEngine, AlertSettings
from spanbudget.collector.alerts.sinks import AlertmanagerSink, Dispatcher
from spanbudget.collector.budget.loader import load_budget

from tests.collector.alerts.alertmanager import Alertmanager, WebhookReceiver, notifying_config
from tests.collector.alerts.recording import COLD_START_BLIP, SUSTAINED, Segment, replay
from tests.support.servers import wait_until

REPO = Path(__file__).resolve().parents[3]
BUDGET = load_budget(REPO / "budget.yaml").budget


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as hook:
        yield hook


@pytest.fixture
def alertmanager(
    debian_binary: Callable[[str], str], tmp_path: Path, receiver: WebhookReceiver
) -> Iterator[Alertmanager]:
    manager = Alertmanager(
        debian_binary("prometheus-alertmanager"), tmp_path, notifying_config(receiver.url)
    )
    manager.start()
    try:
        yield manager
    finally:
        manager.stop()


def notifications(receiver: WebhookReceiver) -> list[tuple[str, str, str]]:
    """(status, stage, severity) of each alert in each notification Alertmanager sent."""
    return [
        (alert["status"], alert["labels"]["stage"], alert["labels"]["severity"])
        for body in receiver.bodies()
        for alert in body["alerts"]
    ]


def play(
    segments: tuple[Segment, ...],
    settings: AlertSettings,
    alertmanager: Alertmanager,
    receiver: WebhookReceiver,
) -> list[Alert]:
    """Replay `segments`; return every change of state the engine sent."""
    total_s = sum(segment.seconds for segment in segments)
    anchor = time.time() - total_s - 120  # the replay ends two minutes ago
    now = [anchor]
    dispatcher = Dispatcher([AlertmanagerSink(alertmanager.url, resend_s=settings.resend_s)])
    sent: list[Alert] = []

    def send(alert: Alert) -> None:
        sent.append(alert)
        dispatcher.send(alert)

    engine = AlertEngine(BUDGET, send, settings, clock=lambda: now[0])
    changes = 0
    try:
        for second, verdicts in replay(BUDGET, segments):
            now[0] = anchor + second
            engine.on_verdicts(verdicts)
            new = [a for a in sent if not a.resent][changes:]
            for change in new:
                expected = ("resolved" if change.resolved else "firing", *change.key[1:])
                wait_until(
                    lambda expected=expected: expected in notifications(receiver),
                    timeout=30,
                    what=f"Alertmanager to notify {expected}",
                )
            changes += len(new)
    finally:
        dispatcher.close()
    return [a for a in sent if not a.resent]


def settle(receiver: WebhookReceiver) -> list[tuple[str, str, str]]:
    """What Alertmanager has notified once three of its group intervals went by quietly."""
    time.sleep(3.5)
    return notifications(receiver)


def test_a_cold_start_blip_notifies_no_one(
    alertmanager: Alertmanager, receiver: WebhookReceiver
) -> None:
    sent = play(COLD_START_BLIP, AlertSettings(), alertmanager, receiver)
    assert sent == []
    assert settle(receiver) == []
    assert alertmanager.alerts() == []


def test_without_for_the_same_blip_notifies_a_page_and_its_resolution(
    alertmanager: Alertmanager, receiver: WebhookReceiver
) -> None:
    """The recording does burn: rules without `for` and hold page (and ticket) on it."""
    eager = [replace(rule, for_s=0, keep_firing_s=0) for rule in DEFAULT_RULES]
    play(COLD_START_BLIP, AlertSettings(rules=eager), alertmanager, receiver)
    assert sorted(settle(receiver)) == [
        ("firing", "retrieval", "page"),
        ("firing", "retrieval", "ticket"),
        ("resolved", "retrieval", "page"),
        ("resolved", "retrieval", "ticket"),
    ]


def test_a_sustained_burn_notifies_once_firing_and_once_resolved(
    alertmanager: Alertmanager, receiver: WebhookReceiver
) -> None:
    sent = play(SUSTAINED, AlertSettings(), alertmanager, receiver)
    assert [(a.severity, a.resolved) for a in sent] == [
        ("page", False),
        ("page", True),
        ("ticket", False),
        ("ticket", True),
    ]
    assert settle(receiver) == [
        ("firing", "retrieval", "page"),
        ("resolved", "retrieval", "page"),
        ("firing", "retrieval", "ticket"),
        ("resolved", "retrieval", "ticket"),
    ]
    first: dict[str, Any] = receiver.bodies()[0]["alerts"][0]
    assert first["labels"] == {
        "alertname": "SpanbudgetBudgetBurn",
        "budget": "rag-ttft",
        "stage": "retrieval",
        "severity": "page",
    }
    notes = first["annotations"]
    assert (notes["windows"], notes["for"], notes["threshold"]) == ("6h/30m", "15m", "6")
    assert len(notes["example_trace_ids"].split()) == 5
    assert alertmanager.alerts(active="true") == []
