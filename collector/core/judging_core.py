"""The judging core: spans in; decided traces, judged against the current budget, out to
every sink.

An intake queue, the tail-based assembly buffer, the evaluator and one worker thread that
waits until traces are due, judges them and hands each step to the sinks. The live
collector (`pipeline.Pipeline`) and `processor.BudgetSpanProcessor` each run one, as the
OpenTelemetry SDK runs one batch processor behind its span and its log processors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from ..budget.model import Budget
from ..context import Annotate
from ..judging.evaluate import Evaluator, Judge
from .assembly import REVISION, Assembly, DueTrace
from .decisions import DecidedTrace, Decisions, VerdictSink
from .held import HeldSpan
from .metrics import CollectorMetrics

__all__ = ["JudgingCore"]

log = logging.getLogger(__name__)
# One `offer`: its spans, the ids of local roots among them, what their traces lost.
_Offer = tuple[Sequence[HeldSpan], Collection[str], Mapping[str, Mapping[str, int]] | None]
# The longest the worker sleeps with nothing due: spans offered without waking it (the
# in-process processor's children) wait no longer than this to be assembled.
_IDLE_WAIT_SECONDS = 0.5


class JudgingCore:
    """Assembles offered spans into traces, judges each trace once it is due, and hands
    every step's decisions to the sinks (`sinks.VerdictSink`), in order.

    The core is the one owner of the current budget: `set_budget` switches it between two
    steps, and the next step tells every sink. It counts the pipeline's health in
    `metrics` (rejected, late, skipped and dropped spans and traces, queue gauges).
    `annotate`, when given, adds to each verdict's attributes what it finds in the trace's
    spans (the request's prompt tokens, the engine's state: `engine_metrics`).
    `between_steps` runs on the worker after each step, when the step's objects are gone
    (`spanbudget collect` collects young garbage there: `live.gc_settings`).
    `offer`, `set_budget`, `flush`, `wait_idle` and `close` may be called from any thread;
    the assembly, the evaluator and the sinks' `consume` belong to the worker thread.
    """

    def __init__(
        self,
        budget: Budget,
        sinks: Iterable[VerdictSink],
        *,
        assembly: Assembly,
        metrics: CollectorMetrics,
        max_queue_spans: int,
        clock: Callable[[], float] = time.monotonic,
        thread_name: str = "spanbudget-worker",
        make_evaluator: Callable[[Budget], Judge] = Evaluator,
        annotate: Annotate | None = None,
        between_steps: Callable[[], object] = lambda: None,
    ) -> None:
        self.sinks = list(sinks)
        self._between_steps = between_steps  # on the worker, after each step
        self._annotate = annotate
        self.metrics = metrics
        self.max_queue_spans = max_queue_spans
        self._assembly = assembly
        self._clock = clock
        self._budget = budget
        self._make_evaluator = make_evaluator
        self._evaluator = make_evaluator(budget)
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # wakes the worker
        self._done = threading.Condition(self._lock)  # wakes whoever waits for a step
        self._queue: list[_Offer] = []
        self._queued_spans = 0
        # Spans the worker took from the queue and has not yet put in the assembly: in
        # neither count, they must still count against the buffer's room (`_taken`).
        self._in_hand = 0
        self._closing = False
        self._busy = False
        self._flush_wanted = 0  # flush requests made ...
        self._flushed = 0  # ... and done
        self._hold_until = float("-inf")  # `hold`, handed to the assembly by the worker
        self._defer_rootless = False  # `defer_rootless`: close leaves rootless traces
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    @property
    def budget(self) -> Budget:
        """The current budget: the last one set, which the next step judges against."""
        return self._budget

    def remember(self, trace_ids: Iterable[str]) -> None:
        """Before `start`: traces decided already (before a restart); their stragglers come
        back as late instead of being judged a second time."""
        if self._thread.is_alive():
            raise RuntimeError("remember() is for before start()")
        self._assembly.remember(trace_ids)

    def start(self) -> None:
        self._thread.start()

    def hold(self, seconds: float) -> None:
        """Judge no trace as complete for `seconds` from now (each still within its max
        age): after a restart that found traces in flight, the senders' retries may bring
        the rest of them in any order (`Assembly.hold`). Any thread."""
        with self._lock:
            self._hold_until = max(self._hold_until, self._clock() + seconds)
            self._work.notify()

    def defer_rootless(self) -> None:
        """At close, leave the traces held without their root unjudged, instead of judging
        them from the part that came: for a caller that keeps their spans and offers them
        again at the next start, where the rest of each trace joins them (the intake
        journal). Any thread."""
        with self._lock:
            self._defer_rootless = True

    def ready(self) -> bool:
        return self._thread.is_alive() and not self._closing

    def offer(
        self,
        spans: Sequence[HeldSpan],
        *,
        local_roots: Collection[str] = (),
        wake: bool = True,
        lost: Mapping[str, Mapping[str, int]] | None = None,
    ) -> bool:
        """Queue spans for the worker; False when the queue is full or the core closing.

        `local_roots` name spans whose parents live in another process (they complete a
        trace as a root would). `wake=False` leaves the worker asleep until its next
        deadline (at most half a second): for a caller that offers span by span, whose
        spans cannot make a trace due sooner. `lost` names spans of these traces refused
        on the way (trace id -> reason -> count): their verdicts say `damaged`.
        """
        n = len(spans)
        if n == 0:  # nothing to judge or forward; queued, such offers would escape the bound
            return True
        with self._lock:
            if self._closing or self._taken() + n > self.max_queue_spans:
                return False
            self._queue.append((spans, local_roots, lost))
            self._queued_spans += n
            if wake:
                self._work.notify()
        return True

    def queued(self) -> int:
        """Spans queued now, counting as queued the room the assembly buffer lacks (the
        whole bound while closing: nothing more is taken)."""
        with self._lock:
            return self.max_queue_spans if self._closing else self._taken()

    def _taken(self) -> int:
        """The queue's spans, or more where the assembly buffer has less room left than
        the queue: what it cannot hold, taken, would evict traces before their decision,
        dropped unjudged (a sender faster than judging is refused instead, and retries).
        The worker owns the assembly; its span count read here is a moment's, and the
        spans the worker has in hand count as held until it has added them (while it adds
        them they count twice: a refusal too many for that moment, never one too few)."""
        assembly = self._assembly
        held = assembly.span_count + self._in_hand + self._queued_spans
        return max(self._queued_spans, self.max_queue_spans - (assembly.max_spans - held))

    def set_budget(self, budget: Budget) -> None:
        """Judge against `budget` from the next step on (traces already judged stay so)."""
        with self._lock:
            self._budget = budget
            self._work.notify()

    def flush(self, timeout: float | None = None) -> bool:
        """Judge every trace held now, on the worker thread, and wait until every sink had
        it; False when `timeout` seconds passed first or the core was never started."""
        with self._lock:
            if not self._thread.is_alive():
                return self._closing  # closed: everything was judged then
            self._flush_wanted += 1
            wanted = self._flush_wanted
            self._work.notify()
            return self._done.wait_for(
                lambda: self._flushed >= wanted or not self._thread.is_alive(), timeout
            ) and (self._flushed >= wanted)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued span is assembled and no trace is held (tests, benches)."""
        with self._lock:
            return self._done.wait_for(
                lambda: not self._queue and not self._busy and not len(self._assembly), timeout
            )

    def close(self) -> None:
        """Refuse new spans, judge everything held and queued, then close every sink."""
        with self._lock:
            self._closing = True
            self._work.notify()
        if self._thread.is_alive():
            self._thread.join()
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                log.exception("closing verdict sink %s failed", sink.name)

    # -- worker -------------------------------------------------------------------------

    def _run(self) -> None:
        assembly = self._assembly
        while True:
            with self._lock:
                if (
                    not self._queue
                    and not self._closing
                    and self._flushed == self._flush_wanted
                    and self._budget is self._evaluator.budget
                ):
                    deadline = assembly.next_deadline()
                    timeout = _IDLE_WAIT_SECONDS
                    if deadline is not None:
                        timeout = min(max(deadline - self._clock(), 0.0), timeout)
                    if timeout > 0:
                        self._work.wait(timeout)
                batches, self._queue = self._queue, []
                self._in_hand = self._queued_spans
                self._queued_spans = 0
                closing = self._closing
                flush_to = self._flush_wanted
                budget = self._budget
                hold_until = self._hold_until
                rootless = not (closing and self._defer_rootless)
                self._busy = True
            try:
                assembly.hold(hold_until)
                self._step(
                    batches, budget, flush=closing or flush_to > self._flushed, rootless=rootless
                )
            except Exception:  # the worker must survive any one bad trace or disk hiccup
                log.exception("judging step failed")
            finally:
                with self._lock:
                    self._in_hand = 0
                    self._busy = False
                    # The last step judged everything, and nothing is taken after it.
                    self._flushed = self._flush_wanted if closing else flush_to
                    self._done.notify_all()
            if closing:
                return
            self._between_steps()

    def _step(
        self,
        batches: list[_Offer],
        budget: Budget,
        *,
        flush: bool,
        rootless: bool = True,
    ) -> None:
        """Assemble `batches`, judge what is due (everything, with `flush`; the traces
        without their root too, unless `rootless` is False) and hand it to the sinks."""
        now = self._clock()
        metrics = self.metrics
        assembly = self._assembly
        switched = budget is not self._evaluator.budget
        if switched:
            self._evaluator = self._make_evaluator(budget)
        traces: list[DecidedTrace] = []
        late: list[HeldSpan] = []
        for spans, local_roots, lost in batches:
            result = assembly.add(spans, now, local_roots=local_roots, lost=lost)
            if result.duplicates:
                metrics.spans_rejected.labels("duplicate").inc(result.duplicates)
            if result.over_trace_limit:
                metrics.spans_rejected.labels("trace_span_limit").inc(result.over_trace_limit)
            if result.late:
                metrics.spans_late.inc(len(result.late))
                late += result.late
            for evicted in result.evicted:
                metrics.traces_dropped.labels("buffer_full").inc()
                traces.append(
                    DecidedTrace(
                        evicted.trace_id, evicted.spans, evicted.reason, None, "buffer_full"
                    )
                )
        with self._lock:
            self._in_hand = 0  # in the assembly's own count now
        due = assembly.flush(rootless=rootless) if flush else assembly.due(now)
        if flush and not rootless and len(assembly):
            log.info(
                "%d trace(s) held without their root left unjudged: their spans are kept"
                " for the next start, where the rest of them joins them",
                len(assembly),
            )
        revised: list[DecidedTrace] = []
        if due:
            for decided in self._judge(due):
                (revised if decided.reason == REVISION else traces).append(decided)
            if revised:
                metrics.verdicts_revised.inc(sum(1 for t in revised if t.judged is not None))
        metrics.buffered_traces.set(len(assembly))
        metrics.intake_queue_spans.set(self._queued_spans)
        if not (traces or late or switched or revised):
            return
        decisions = Decisions(budget, traces, late, revised)
        for sink in self.sinks:
            try:
                sink.consume(decisions)
            except Exception:  # one sink's failure is no other sink's
                log.exception("verdict sink %s failed", sink.name)
                metrics.export_failures.labels(sink.name).inc()

    def _judge(self, due: list[DueTrace]) -> list[DecidedTrace]:
        evaluator = self._evaluator
        evaluated_at = datetime.now(UTC)
        out: list[DecidedTrace] = []
        for trace in due:
            try:
                judged = evaluator.judge([h.span for h in trace.spans], evaluated_at=evaluated_at)
            except Exception:
                log.exception("evaluating trace %s failed", trace.trace_id)
                self.metrics.traces_dropped.labels("evaluation_error").inc()
                out.append(
                    DecidedTrace(
                        trace.trace_id, trace.spans, trace.reason, None, "evaluation_error"
                    )
                )
                continue
            if judged is None:
                if trace.reason != REVISION:
                    self.metrics.traces_skipped.inc()
            else:
                if trace.lost:  # spans refused on the way: judged, but not as if whole
                    judged = replace(judged, verdict=judged.verdict.as_damaged(trace.lost))
                if self._annotate is not None:
                    verdict = judged.verdict
                    extra = self._annotate([h.span for h in trace.spans])
                    if extra:
                        attributes = {**verdict.attributes, **extra}
                        judged = replace(judged, verdict=replace(verdict, attributes=attributes))
            out.append(DecidedTrace(trace.trace_id, trace.spans, trace.reason, judged))
        return out
