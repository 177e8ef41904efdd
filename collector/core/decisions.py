"""Where the judging core's decisions go: the `VerdictSink` protocol and what each step
hands every sink.

The verdict store (`store.StoreSink`), the metrics (`metrics.MetricsSink`), forwarding
(`forward.Forwarder`), the alerts (`alerting.AlertsSink`) and `BudgetSpanProcessor`'s
callbacks are sinks; none of them knows of another.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..budget.model import Budget
from ..judging.evaluate import Judged
from ..judging.verdict import Verdict
from .held import HeldSpan

__all__ = ["DecidedTrace", "Decisions", "Retention", "VerdictSink"]


@dataclass(frozen=True, slots=True)
class DecidedTrace:
    """A trace the core has decided: every span it held and, if it was judged, the judgement.

    `reason` says why it was decided now: complete, max_age, evicted or flush. Not judged
    (`judged` None): skipped when `dropped` is None (no span matched a stage, DESIGN §5
    rule 0), else dropped unjudged: `buffer_full` (evicted to make room) or
    `evaluation_error`.
    """

    trace_id: str
    spans: Sequence[HeldSpan]
    reason: str
    judged: Judged | None = None
    dropped: str | None = None

    @property
    def skipped(self) -> bool:
        return self.judged is None and self.dropped is None


@dataclass(frozen=True, slots=True)
class Decisions:
    """One step of the core, as every sink receives it.

    `budget` is the one the step's verdicts were judged against; after a reload the next
    step carries the new one even when it decided nothing. `late` are spans of traces
    decided before (in an earlier step, or before a restart); `revised` are traces
    judged again with such spans (a trace is in `traces` once, and in `revised` any
    number of times after).
    """

    budget: Budget
    traces: Sequence[DecidedTrace]
    late: Sequence[HeldSpan] = ()
    # Traces judged again because late spans came within the revision horizon: their
    # verdicts replace the first ones (the store, the kept spans, the metrics' count);
    # every other sink has had the trace and its late spans already and leaves these be.
    revised: Sequence[DecidedTrace] = ()

    def verdicts(self) -> list[Verdict]:
        """The verdicts of the judged traces, in the order they were decided."""
        return [trace.judged.verdict for trace in self.traces if trace.judged is not None]


class VerdictSink(Protocol):
    """A destination of the judging core's decisions.

    Contract:
    - `consume` runs on the core's worker thread, once per step that decided a trace, met
      a late span or switched the budget; sinks are called one after another in the order
      the core was given them, each with the same `Decisions`. A trace is decided once:
      it is in one call only, and a span that arrives after its trace was decided is
      `late`, never judged again.
    - `consume` must return quickly: work that waits on the network or a disk far away
      goes to the sink's own bounded queue and thread.
    - An exception from `consume` is logged and counted in
      `spanbudget_export_failures_total{sink=name}`; the other sinks still get the step
      and the core goes on.
    - Treat the decisions as read-only; the one exception is the forwarder, which annotates
      the OTLP originals (`HeldSpan.proto`) it sends.
    - `close` is called once, on the worker thread, after the last `consume` (shutdown).
    """

    name: str

    def consume(self, decisions: Decisions) -> None: ...

    def close(self) -> None: ...


class Retention:
    """A store's retention, applied from a sink at most once every `every_s` seconds (the
    first call applies it): `prune` gets the wall-clock time to count ages from."""

    def __init__(
        self,
        prune: Callable[[float], object],
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._prune = prune
        self.every_s = every_s
        self._clock = clock
        self._last = -every_s

    def tick(self) -> None:
        now = self._clock()
        if now - self._last >= self.every_s:
            self._last = now
            self._prune(time.time())
