"""Judging each trace with the budget its instrumentation calls for.

Out of the box, an app traced by OpenLLMetry, OpenInference, OpenLIT or the OpenTelemetry
GenAI instrumentation is judged by that library's preset (its stage map and its
first-token marks), recognised per trace from what the spans carry (`budget.recognize`);
a trace recognised as none of them is judged by the budget in effect (the reference
path's, or the user's own file). A file of several libraries' traces works. A budget that
extends a preset (`preset: openllmetry`, or `--preset`) pins it: every trace is judged by
it, recognised or not.

`Judges` stands where an `Evaluator` does (`judge`, `evaluate`, `budget`), so that
`check`, `collect`, `report`, `compare` and `budget suggest` recognise alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from ..budget.loader import load_preset
from ..budget.model import Budget
from ..budget.recognize import Instrumentation, recognize
from ..spans import Span
from .evaluate import Evaluator, Judged
from .verdict import Verdict

__all__ = ["Judges"]


class Judges:
    """The evaluator of the budget in effect, and one per preset that recognition picks,
    made when first needed. `recognise=False` (or a budget that pins a preset) judges
    every trace with `budget`."""

    def __init__(
        self,
        budget: Budget,
        *,
        recognise: bool = True,
        compiled: bool | None = None,
        preset: Callable[[str], Budget] = lambda name: load_preset(name).budget,
    ) -> None:
        self.budget = budget
        self.pinned = budget.preset is not None or not recognise
        self._compiled = compiled
        self._preset = preset
        self._own = Evaluator(budget, compiled=compiled)
        self._by_preset: dict[str, Evaluator] = {}
        self._recognize: Callable[[Sequence[Span]], Instrumentation | None] = recognize
        if self._own.compiled:  # recognition compiled with the evaluator's fast path
            from . import _judge

            self._recognize = _judge.recognize

    @property
    def compiled(self) -> bool:
        return self._own.compiled

    def evaluator_for(self, spans: Sequence[Span]) -> tuple[Evaluator, str | None]:
        """The evaluator that judges these spans (one trace's), and the instrumentation
        that chose it (None: the budget in effect, as its own)."""
        if self.pinned:
            return self._own, self.budget.preset
        found = self._recognize(spans)
        if found is None:
            return self._own, None
        evaluator = self._by_preset.get(found.preset)
        if evaluator is None:
            evaluator = Evaluator(self._preset(found.preset), compiled=self._compiled)
            self._by_preset[found.preset] = evaluator
        return evaluator, found.preset

    def budgets(self) -> list[Budget]:
        """The budget in effect and every preset's that judged a trace so far."""
        return [self.budget, *(e.budget for e in self._by_preset.values())]

    def judge(
        self, spans: Sequence[Span], *, evaluated_at: datetime, keep_tree: bool = False
    ) -> Judged | None:
        """`Evaluator.judge` by the evaluator these spans call for; the verdict names the
        instrumentation that chose it."""
        evaluator, instrumentation = self.evaluator_for(spans)
        return evaluator.judge(
            spans, evaluated_at=evaluated_at, keep_tree=keep_tree, instrumentation=instrumentation
        )

    def evaluate(self, spans: Sequence[Span], *, evaluated_at: datetime) -> Verdict | None:
        judged = self.judge(spans, evaluated_at=evaluated_at)
        return None if judged is None else judged.verdict
