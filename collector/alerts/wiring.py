"""Assemble the alerting of one collector: the rule engine, its sinks and their dispatcher."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spanbudget.collector.alerts.engine import AlertEngine, AlertSettings
from spanbudget.collector.alerts.sinks import (
    AlertmanagerSink,
    AlertSink,
    Dispatcher,
    LogSink,
    WebhookSink,
)
from spanbudget.collector.budget.model import Budget

__all__ = ["Alerting", "build_alerting"]


@dataclass
class Alerting:
    engine: AlertEngine  # a verdict listener for the pipeline
    dispatcher: Dispatcher

    def start(self) -> None:
        self.engine.start()

    def close(self) -> None:
        self.engine.close()
        self.dispatcher.close()


def build_alerting(
    budget: Budget,
    settings: AlertSettings,
    *,
    alertmanager: str | None = None,
    webhook: str | None = None,
    on_failure: Callable[[str], None] = lambda sink: None,
) -> Alerting:
    """The log sink always; Alertmanager and the webhook when their URLs are given."""
    sinks: list[AlertSink] = [LogSink()]
    if alertmanager:
        sinks.append(AlertmanagerSink(alertmanager, resend_s=settings.resend_s))
    if webhook:
        sinks.append(WebhookSink(webhook))
    dispatcher = Dispatcher(sinks, on_failure=on_failure)
    return Alerting(AlertEngine(budget, dispatcher.send, settings), dispatcher)
