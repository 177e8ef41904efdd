"""`BudgetSpanProcessor`: the collector's verdicts inside any process, as an OTel SDK processor.

Add it to your own `TracerProvider`; ended spans are grouped by trace, decided with the
same tail-based rules as the collector, judged, and each verdict is handed to a callback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace import StatusCode

from spanbudget.collector.budget import Budget
from spanbudget.collector.evaluate import Evaluator
from spanbudget.collector.live.assembly import Assembly, DueTrace
from spanbudget.collector.spans import Span, SpanKind
from spanbudget.collector.verdict import Verdict
from spanbudget.semconv import SERVICE_NAME

__all__ = ["BudgetSpanProcessor", "span_from_sdk"]

log = logging.getLogger(__name__)


def span_from_sdk(span: ReadableSpan) -> Span:
    """An ended SDK span as the evaluator's `Span`."""
    context = span.context
    assert context is not None  # an ended SDK span always has one
    parent = span.parent
    service = span.resource.attributes.get(SERVICE_NAME, "unknown_service")
    start = span.start_time or 0
    end = span.end_time or start
    return Span(
        trace_id=format(context.trace_id, "032x"),
        span_id=format(context.span_id, "016x"),
        parent_span_id=None if parent is None else format(parent.span_id, "016x"),
        name=span.name,
        start_ns=start,
        end_ns=max(end, start),
        kind=SpanKind[span.kind.name],
        service=str(service),
        attributes=dict(span.attributes or {}),  # type: ignore[arg-type]
        error=span.status.status_code is StatusCode.ERROR,
    )


class BudgetSpanProcessor(SpanProcessor):
    """Judges this process's traces against `budget` and calls `on_verdict` with each verdict.

    A trace is decided once its local root has ended (a span with no parent, or whose
    parent is remote) and `decision_wait` seconds passed with no new span, or when it is
    `max_age` seconds old. Skipped traces (no stage matched) go to `on_skipped`, if given.
    Callbacks run on the processor's own thread; their exceptions are logged. Bounded like
    the collector: `max_traces` held (oldest dropped first), `max_spans_per_trace` each.
    """

    def __init__(
        self,
        budget: Budget,
        on_verdict: Callable[[Verdict], None],
        *,
        on_skipped: Callable[[str], None] | None = None,
        decision_wait: float = 2.0,
        max_age: float = 30.0,
        max_traces: int = 10_000,
        max_spans_per_trace: int = 1_000,
    ) -> None:
        self._evaluator = Evaluator(budget)
        self._on_verdict = on_verdict
        self._on_skipped = on_skipped
        self._assembly = Assembly(
            decision_wait=decision_wait,
            max_age=max_age,
            max_traces=max_traces,
            max_spans_per_trace=max_spans_per_trace,
            decided_memory=max_traces * 4,
        )
        self._lock = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="budget-processor", daemon=True)
        self._thread.start()

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if self._stopped or span.context is None:
            return
        converted = span_from_sdk(span)
        local_root = span.parent is not None and span.parent.is_remote
        with self._lock:
            self._assembly.add(
                [converted],
                None,
                time.monotonic(),
                local_roots=(converted.span_id,) if local_root else (),
            )
            # Only a root can make a trace due sooner than the thread's next wake-up.
            if converted.parent_span_id is None or local_root:
                self._lock.notify()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Judge every held trace now."""
        with self._lock:
            due = self._assembly.flush()
        self._judge(due)
        return True

    def shutdown(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify()
        self._thread.join()
        self.force_flush()

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                deadline = self._assembly.next_deadline()
                timeout = 1.0 if deadline is None else max(deadline - time.monotonic(), 0.0)
                if timeout > 0:
                    self._lock.wait(min(timeout, 1.0))
                due = self._assembly.due(time.monotonic())
            self._judge(due)

    def _judge(self, due: list[DueTrace]) -> None:
        if not due:
            return
        evaluated_at = datetime.now(UTC)
        for trace in due:
            try:
                verdict = self._evaluator.evaluate(trace.spans, evaluated_at=evaluated_at)
                if verdict is not None:
                    self._on_verdict(verdict)
                elif self._on_skipped is not None:
                    self._on_skipped(trace.trace_id)
            except Exception:
                log.exception("budget processor: trace %s failed", trace.trace_id)
