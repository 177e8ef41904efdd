"""The burn-rate alert engine as one of the judging core's sinks."""

from __future__ import annotations

from spanbudget.collector.alerts.engine import AlertEngine
from spanbudget.collector.live.sinks import Decisions

__all__ = ["AlertsSink"]


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
