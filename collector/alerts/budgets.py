"""The burn-rate rules of every budget that judges the collector's traces.

`collect` judges each trace by the budget its instrumentation calls for (`judging.auto`):
the budget in effect, or the preset of the library that made the trace (OpenLLMetry,
OpenInference, OpenLIT, the GenAI conventions, vLLM). A preset's verdicts have their own
stages and limits, so they burn their own error budget: `BudgetAlerts` keeps one
`AlertEngine` a budget, the one in effect from the start and a preset's from the first
verdict it judged (or at start, when its rules had a state saved), and hands each step's
verdicts to the engine of their budget. Their alerts go to the same dispatcher, each
naming its budget; each engine keeps its own saved state and, after a restart, refills
its windows from its own stored verdicts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from ..budget.model import Budget
from ..judging.verdict import Verdict
from .engine import Alert, AlertEngine, AlertSettings
from .state import RuleStatus

__all__ = ["BudgetAlerts"]

log = logging.getLogger(__name__)


class BudgetAlerts:
    """One `AlertEngine` for the budget in effect and one for each preset that judged a
    trace. `make(budget)` makes a budget's engine, restored from its saved state and
    stored verdicts; `preset(name)` is the preset's budget of that name, as verdicts name
    it (`loader.BudgetNames`), None for another.

    `on_verdicts` and `set_budget` run on the judging core's worker; `rule_states`,
    `firing` and `budget` from any thread."""

    def __init__(
        self,
        budget: Budget,
        make: Callable[[Budget], AlertEngine],
        preset: Callable[[str], Budget | None],
        *,
        restored: Iterable[Budget] = (),
    ) -> None:
        self._make = make
        self._preset = preset
        self._lock = threading.Lock()
        self._current = make(budget)
        self._others: dict[str, AlertEngine] = {}  # by budget name, in the order first met
        # Presets whose rules saved a state (an earlier process judged their traces): made
        # now, so that a firing alert is carried on (or resolved) without waiting for traffic.
        for other in restored:
            if other.name != budget.name and other.name not in self._others:
                self._others[other.name] = make(other)
        self._unknown: set[str] = set()  # budgets no preset is, or that failed to load
        self._started = False

    @property
    def budget(self) -> Budget:
        """The budget in effect."""
        return self._current.budget

    @property
    def settings(self) -> AlertSettings:
        return self._current.settings

    def engines(self) -> list[AlertEngine]:
        """The budget in effect's engine first, then the presets' as they were first met."""
        with self._lock:
            return [self._current, *self._others.values()]

    def set_budget(self, budget: Budget) -> None:
        """The budget in effect was reloaded: its engine follows (`AlertEngine.set_budget`)."""
        self._current.set_budget(budget)

    def on_verdicts(self, verdicts: Sequence[Verdict]) -> None:
        """Each verdict to its budget's engine, a step's at once; a verdict of a budget no
        longer in effect (judged before a reload) is left out, as one engine leaves it."""
        current = self._current.budget.name
        by_budget: dict[str, list[Verdict]] = {}
        for verdict in verdicts:
            by_budget.setdefault(verdict.budget, []).append(verdict)
        for name, judged in by_budget.items():
            engine = self._current if name == current else self._engine_for(name)
            if engine is not None:
                engine.on_verdicts(judged)

    def _engine_for(self, name: str) -> AlertEngine | None:
        engine = self._others.get(name)
        if engine is not None or name in self._unknown:
            return engine
        try:
            budget = self._preset(name)
        except Exception:
            log.exception("no alert rules for budget %r: its preset did not load", name)
            budget = None
        if budget is None:  # not a preset's: a budget no longer in effect, say
            self._unknown.add(name)
            return None
        engine = self._make(budget)
        with self._lock:
            self._others[name] = engine
            started = self._started
        if started:
            engine.start()
        log.info("alert rules on for budget %r (preset %s)", name, budget.preset)
        return engine

    def rule_states(self) -> list[RuleStatus]:
        """Every budget's rules on every stage, the budget in effect first."""
        return [status for engine in self.engines() for status in engine.rule_states()]

    def firing(self) -> list[Alert]:
        return [alert for engine in self.engines() for alert in engine.firing()]

    def start(self) -> None:
        """Start every engine's timer; an engine made later starts as it is made."""
        with self._lock:
            self._started = True
            engines = [self._current, *self._others.values()]
        for engine in engines:
            engine.start()

    def close(self) -> None:
        for engine in self.engines():
            engine.close()
