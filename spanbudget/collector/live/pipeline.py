"""The collector's core: a bounded intake queue and one worker that assembles, judges,
stores, observes, forwards and tells listeners, off the request path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from spanbudget.collector.budget import Budget
from spanbudget.collector.budget_file import BudgetError, load_budget
from spanbudget.collector.evaluate import Evaluator
from spanbudget.collector.live.assembly import AddResult, Assembly, DueTrace
from spanbudget.collector.live.forward import Forwarder, annotate
from spanbudget.collector.live.intake import Batch
from spanbudget.collector.live.metrics import CollectorMetrics
from spanbudget.collector.live.settings import CollectorSettings
from spanbudget.collector.live.span_store import SpanStore
from spanbudget.collector.live.store import VerdictStore
from spanbudget.collector.verdict import Verdict

__all__ = ["Pipeline", "VerdictListener"]

log = logging.getLogger(__name__)
_PRUNE_EVERY_SECONDS = 60.0
_IDLE_WAIT_SECONDS = 0.5


class VerdictListener(Protocol):
    """Told about verdicts right after they are stored (the alerting seam).

    Called on the worker thread with each batch of newly stored verdicts; a trace is
    delivered once (late spans and repeats never re-deliver it). Must return quickly: queue
    slow work (network sinks) on your own thread. Exceptions are logged and counted as an
    export failure under `sink=name`.
    """

    name: str

    def on_verdicts(self, verdicts: Sequence[Verdict]) -> None: ...


class Pipeline:
    """Owns the intake queue, the assembly buffer, the evaluator, the store and the sinks."""

    def __init__(
        self,
        settings: CollectorSettings,
        budget: Budget,
        *,
        metrics: CollectorMetrics,
        store: VerdictStore,
        forwarder: Forwarder | None = None,
        listeners: Sequence[VerdictListener] = (),
        spans: SpanStore | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.store = store
        self.spans = spans  # the judged traces' spans, for the web UI's trace page
        self.forwarder = forwarder
        self.listeners = list(listeners)
        self._clock = clock
        self._evaluator = Evaluator(budget)
        self._assembly = Assembly(
            decision_wait=settings.decision_wait_seconds,
            max_age=settings.max_trace_age_seconds,
            max_traces=settings.max_traces,
            max_spans_per_trace=settings.max_spans_per_trace,
            decided_memory=settings.decided_memory,
            max_spans=settings.max_buffered_spans,
        )
        self._queue: deque[Batch] = deque()
        self._queued_spans = 0
        self._cond = threading.Condition()
        self._closing = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="spanbudget-worker", daemon=True)
        self._last_prune = 0.0

    @property
    def budget(self) -> Budget:
        return self._evaluator.budget

    @property
    def keeps_protos(self) -> bool:
        return self.forwarder is not None

    def start(self) -> None:
        self._thread.start()

    def ready(self) -> bool:
        return self._thread.is_alive() and not self._closing

    # -- request path -------------------------------------------------------------------

    def offer(self, batch: Batch) -> bool:
        """Queue a decoded request for the worker; False when the queue is full or closing."""
        n = len(batch.spans)
        if n == 0:  # nothing to judge or forward; queued, such requests would escape the bound
            return True
        with self._cond:
            if self._closing or self._queued_spans + n > self.settings.intake_queue_spans:
                return False
            self._queue.append(batch)
            self._queued_spans += n
            self._cond.notify()
        return True

    # -- control ------------------------------------------------------------------------

    def reload_budget(self, path: Path) -> bool:
        """Validate `path` and switch to it; on error keep the current budget. Logs which."""
        try:
            loaded = load_budget(path)
        except (BudgetError, OSError) as exc:
            self.metrics.budget_reloads.labels("error").inc()
            log.error("budget reload failed, keeping %r: %s", self.budget.name, exc)
            return False
        for warning in loaded.warnings:
            log.warning("budget %s: %s", path, warning)
        self._evaluator = Evaluator(loaded.budget)  # the worker picks it up on its next trace
        self.metrics.budget_reloads.labels("ok").inc()
        log.info("budget reloaded from %s: %r", path, loaded.budget.name)
        return True

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued span is assembled and no trace is held (tests, benches)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._cond:
                if not self._queue and not self._busy and not len(self._assembly):
                    return True
            time.sleep(0.005)
        return False

    def close(self) -> None:
        """Refuse new spans, judge everything held now, drain the forwarder, close the store."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()
        if self.forwarder is not None:
            self.forwarder.close(self.settings.shutdown_drain_seconds)
        self.store.close()
        if self.spans is not None:
            self.spans.close()

    # -- worker -------------------------------------------------------------------------

    def _run(self) -> None:
        assembly = self._assembly
        while True:
            with self._cond:
                if not self._queue and not self._closing:
                    deadline = assembly.next_deadline()
                    timeout = _IDLE_WAIT_SECONDS
                    if deadline is not None:
                        timeout = min(max(deadline - self._clock(), 0.0), timeout)
                    if timeout > 0:
                        self._cond.wait(timeout)
                batches = list(self._queue)
                self._queue.clear()
                self._queued_spans = 0
                closing = self._closing
                self._busy = True
            try:
                self._step(batches, closing)
            except Exception:  # the worker must survive any one bad trace or disk hiccup
                log.exception("collector worker step failed")
            finally:
                with self._cond:
                    self._busy = False
            if closing:
                return

    def _step(self, batches: list[Batch], closing: bool) -> None:
        now = self._clock()
        metrics = self.metrics
        late_counts: dict[str, int] = {}
        forward: list[Any] = []
        for batch in batches:
            result = self._assembly.add(batch.spans, batch.protos or None, now)
            self._account(result, late_counts, forward)
        due = self._assembly.flush() if closing else self._assembly.due(now)
        if due:
            self._decide(due, forward)
        if late_counts:
            self.store.add_late(late_counts)
        if forward and self.forwarder is not None:
            self.forwarder.submit(forward)
        metrics.buffered_traces.set(len(self._assembly))
        metrics.intake_queue_spans.set(self._queued_spans)
        if now - self._last_prune >= _PRUNE_EVERY_SECONDS:
            self._last_prune = now
            self.store.prune(time.time())
            if self.spans is not None:
                self.spans.prune(time.time())

    def _account(self, result: AddResult, late_counts: dict[str, int], forward: list[Any]) -> None:
        metrics = self.metrics
        if result.duplicates:
            metrics.spans_rejected.labels("duplicate").inc(result.duplicates)
        if result.over_trace_limit:
            metrics.spans_rejected.labels("trace_span_limit").inc(result.over_trace_limit)
        if result.late:
            metrics.spans_late.inc(len(result.late))
            for span, payload in result.late:
                late_counts[span.trace_id] = late_counts.get(span.trace_id, 0) + 1
                if payload is not None:
                    forward.append(payload)
        for trace in result.evicted:
            metrics.traces_dropped.labels("buffer_full").inc()
            forward.extend(trace.payloads)

    def _decide(self, due: list[DueTrace], forward: list[Any]) -> None:
        evaluator = self._evaluator
        evaluated_at = datetime.now(UTC)
        judged: list[tuple[Verdict, int]] = []
        for trace in due:
            try:
                verdict = evaluator.evaluate(trace.spans, evaluated_at=evaluated_at)
            except Exception:
                log.exception("evaluating trace %s failed", trace.trace_id)
                self.metrics.traces_dropped.labels("evaluation_error").inc()
                verdict = None
            else:
                if verdict is None:
                    self.metrics.traces_skipped.inc()
            if verdict is not None:
                judged.append((verdict, len(trace.spans)))
                if trace.payloads:
                    annotate(trace.payloads, verdict)
            forward.extend(trace.payloads)
        try:
            fresh = self.store.write(judged)
        except Exception:  # a full or locked disk must not stop judging or forwarding
            log.exception("storing %d verdicts failed", len(judged))
            self.metrics.export_failures.labels("store").inc()
            fresh = [verdict for verdict, _ in judged]  # still measured and alerted on
        for verdict in fresh:
            self.metrics.observe(verdict)
        if not fresh:
            return
        if self.spans is not None:
            self._keep_spans(due, fresh)
        for listener in self.listeners:
            try:
                listener.on_verdicts(fresh)
            except Exception:
                log.exception("verdict listener %s failed", listener.name)
                self.metrics.export_failures.labels(listener.name).inc()

    def _keep_spans(self, due: list[DueTrace], fresh: list[Verdict]) -> None:
        assert self.spans is not None
        judged = {verdict.trace_id for verdict in fresh}
        dropped = self.spans.keep([trace.spans for trace in due if trace.trace_id in judged])
        if dropped:  # the span store's queue is full: those trace pages lose their waterfall
            self.metrics.export_failures.labels("spans").inc(dropped)
