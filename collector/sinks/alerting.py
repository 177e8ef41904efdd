"""The burn-rate alert engine as one of the judging core's sinks, and its wiring from the
collector's settings: the rules, and the dispatcher that sends their alerts on."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ..alerts.budgets import BudgetAlerts
from ..alerts.engine import AlertEngine, AlertSettings
from ..alerts.persist import AlertStateFile
from ..alerts.sinks import (
    AlertmanagerSink,
    AlertSink,
    Dispatcher,
    LogSink,
    WebhookSink,
)
from ..budget.loader import BudgetNames
from ..budget.model import Budget
from ..core.decisions import Decisions
from ..core.metrics import CollectorMetrics
from .settings import AlertsSettings

__all__ = ["AlertsSink", "build_alerts"]


class AlertsSink:
    """The burn-rate alert rules as a sink: each step's verdicts feed the windows of their
    budget's rules, and a budget the core switched to restarts the rules of the budget in
    effect (`AlertEngine.set_budget`), so that the core stays the one owner of the current
    budget. The rules' timers and their dispatcher are started and closed with the
    collector (`pipeline.Pipeline`)."""

    name = "alerts"

    def __init__(self, alerts: BudgetAlerts) -> None:
        self.alerts = alerts

    def consume(self, decisions: Decisions) -> None:
        if decisions.budget != self.alerts.budget:
            self.alerts.set_budget(decisions.budget)
        verdicts = decisions.verdicts()
        if verdicts:
            self.alerts.on_verdicts(verdicts)

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
    history: Callable[[float, str], Iterable[tuple[float, str, frozenset[str]]]],
    preset: Callable[[str], Budget | None] | None = None,
) -> tuple[BudgetAlerts, Dispatcher]:
    """The burn-rate rules of the budget in effect and of each preset that judges a trace,
    and their dispatcher: to the log always, to Alertmanager and the webhook when
    `settings` name them. `history(since, budget name)` gives what the store judged of
    that budget since then: the windows see it again, as after a Prometheus restart, so
    that a firing alert stays the same alert (no second page) and a pending rule keeps its
    clock. The budget in effect saves its rules' state in `state_path`, a preset's beside
    it under its budget's name (`verdicts.alerts.<name>.json`); a preset with a saved
    state has its rules made at once, to carry its alerts on across the restart."""
    sinks: list[AlertSink] = [LogSink()]
    if settings.alertmanager:
        sinks.append(AlertmanagerSink(settings.alertmanager, resend_s=settings.resend_seconds))
    if settings.webhook:
        sinks.append(WebhookSink(settings.webhook))
    dispatcher = Dispatcher(
        sinks, on_failure=lambda sink: metrics.export_failures.labels(sink).inc()
    )
    rules = AlertSettings(
        window_scale=settings.window_scale,
        min_judged=settings.min_traces,
        min_overruns=settings.min_overruns,
        resend_s=settings.resend_seconds,
        tick_s=settings.tick_seconds,
        ui_url=ui_url,
        jaeger_ui=jaeger_ui or "",
    )

    def state_of(name: str) -> AlertStateFile | None:
        if state_path is None:
            return None
        if name == budget.name:
            return AlertStateFile(state_path)
        return AlertStateFile(state_path.with_name(f"{state_path.stem}.{name}.json"))

    def make(judging: Budget) -> AlertEngine:
        engine = AlertEngine(judging, dispatcher.send, rules, state=state_of(judging.name))
        engine.restore(history(time.time() - engine.history_s, judging.name))
        return engine

    presets = preset or BudgetNames()
    restored: list[Budget] = []  # the presets whose rules saved a state
    if state_path is not None:
        prefix = f"{state_path.stem}."
        for path in sorted(state_path.parent.glob(f"{prefix}*.json")):
            found = presets(path.name.removeprefix(prefix).removesuffix(".json"))
            if found is not None:
                restored.append(found)
    return BudgetAlerts(budget, make, presets, restored=restored), dispatcher
