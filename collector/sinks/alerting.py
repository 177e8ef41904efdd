"""The burn-rate alert engine as one of the judging core's sinks, and its wiring from the
collector's settings: the rules, and the dispatcher that sends their alerts on."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ..alerts.engine import AlertEngine, AlertSettings
from ..alerts.persist import AlertStateFile
from ..alerts.sinks import (
    AlertmanagerSink,
    AlertSink,
    Dispatcher,
    LogSink,
    WebhookSink,
)
from ..budget.model import Budget
from ..core.decisions import Decisions
from ..core.metrics import CollectorMetrics
from .settings import AlertsSettings

__all__ = ["AlertsSink", "build_alerts"]


class AlertsSink:
    """The burn-rate alert engine as a sink: each step's verdicts feed its windows, and a
    budget the core switched to restarts them (`AlertEngine.set_budget`), so that the core
    stays the one owner of the current budget. The engine's timer and its dispatcher are
    started and closed with the collector (`pipeline.Pipeline`)."""

    name = "alerts"

    def __init__(self, engine: AlertEngine) -> None:
        self.engine = engine

    def consume(self, decisions: Decisions) -> None:
        if decisions.budget != self.engine.budget:
            self.engine.set_budget(decisions.budget)
        verdicts = decisions.verdicts()
        if verdicts:
            self.engine.on_verdicts(verdicts)

    def close(self) -> None:
        return None


def build_alerts(
    settings: AlertsSettings,
    budget: Budget,
    metrics: CollectorMetrics,
    *,
    ui_url: str,
    jaeger_ui: str | None,
    state_path: Path | None,
    history: Callable[[float], Iterable[tuple[float, str, frozenset[str]]]],
) -> tuple[AlertEngine, Dispatcher]:
    """The burn-rate rules and their dispatcher: to the log always, to Alertmanager and the
    webhook when `settings` name them. `history(since)` gives what the store judged since
    then: the windows see it again, as after a Prometheus restart, so that a firing alert
    stays the same alert (no second page) and a pending rule keeps its clock."""
    sinks: list[AlertSink] = [LogSink()]
    if settings.alertmanager:
        sinks.append(AlertmanagerSink(settings.alertmanager, resend_s=settings.resend_seconds))
    if settings.webhook:
        sinks.append(WebhookSink(settings.webhook))
    dispatcher = Dispatcher(
        sinks, on_failure=lambda sink: metrics.export_failures.labels(sink).inc()
    )
    engine = AlertEngine(
        budget,
        dispatcher.send,
        AlertSettings(
            window_scale=settings.window_scale,
            min_judged=settings.min_traces,
            min_overruns=settings.min_overruns,
            resend_s=settings.resend_seconds,
            tick_s=settings.tick_seconds,
            ui_url=ui_url,
            jaeger_ui=jaeger_ui or "",
        ),
        state=None if state_path is None else AlertStateFile(state_path),
    )
    engine.restore(history(time.time() - engine.history_s))
    return engine, dispatcher
