"""`BudgetSpanProcessor`: the collector's verdicts inside any process, as an OTel SDK processor.

Add it to your own `TracerProvider`; ended spans go to the same judging core as the
collector's (tail-based assembly, the evaluator, one worker thread), and each verdict is
handed to a callback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry
from spanbudget.common.semconv import HOST_ID, HOST_NAME, SERVICE_NAME

from ..budget.model import Budget
from ..judging.auto import Judges
from ..judging.verdict import Verdict
from ..spans import Span, SpanKind, first_events
from .assembly import Assembly
from .decisions import Decisions
from .held import HeldSpan
from .judging_core import JudgingCore
from .metrics import CollectorMetrics

__all__ = ["BudgetSpanProcessor", "span_from_sdk"]

log = logging.getLogger(__name__)


def span_from_sdk(span: ReadableSpan) -> Span:
    """An ended SDK span as the evaluator's `Span`, its events kept as the OTLP reader
    keeps them (each name once, at its earliest), so event first-token marks count here
    as they do through the collector."""
    context = span.context
    assert context is not None  # an ended SDK span always has one
    parent = span.parent
    resource = span.resource.attributes
    service = resource.get(SERVICE_NAME, "unknown_service")
    host = resource.get(HOST_NAME) or resource.get(HOST_ID)
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
        events=first_events((e.name, e.timestamp) for e in span.events) if span.events else (),
        host=None if host is None else str(host),
        scope=span.instrumentation_scope.name if span.instrumentation_scope else None,
    )


class CallbackSink:
    """Hands each verdict, and each skipped trace's id, to the processor's callbacks; an
    exception from one is logged and the next verdict still goes out."""

    name = "callback"

    def __init__(
        self, on_verdict: Callable[[Verdict], None], on_skipped: Callable[[str], None] | None
    ) -> None:
        self.on_verdict = on_verdict
        self.on_skipped = on_skipped

    def consume(self, decisions: Decisions) -> None:
        for trace in decisions.traces:
            try:
                if trace.judged is not None:
                    self.on_verdict(trace.judged.verdict)
                elif trace.skipped and self.on_skipped is not None:
                    self.on_skipped(trace.trace_id)
            except Exception:
                log.exception("budget processor: a callback failed on trace %s", trace.trace_id)

    def close(self) -> None:
        return None


class BudgetSpanProcessor(SpanProcessor):
    """Judges this process's traces against `budget` and calls `on_verdict` with each verdict.

    A trace is decided once its local root has ended (a span with no parent, or whose
    parent is remote) and `decision_wait` seconds passed with no new span, or when it is
    `max_age` seconds old. Skipped traces (no stage matched) go to `on_skipped`, if given.
    Callbacks run on the processor's own thread; their exceptions are logged. Bounded like
    the collector: `max_traces` held (the oldest dropped unjudged first),
    `max_spans_per_trace` each, and `max_queue_spans` ended spans waiting for the thread
    (more are dropped). `metrics` counts them, on a registry of the processor's own.
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
        max_queue_spans: int = 50_000,
    ) -> None:
        self.metrics = CollectorMetrics(CollectorRegistry())
        assembly = Assembly(
            decision_wait=decision_wait,
            max_age=max_age,
            max_traces=max_traces,
            max_spans_per_trace=max_spans_per_trace,
            decided_memory=max_traces * 4,
        )
        self._core = JudgingCore(
            budget,
            [CallbackSink(on_verdict, on_skipped)],
            assembly=assembly,
            metrics=self.metrics,
            max_queue_spans=max_queue_spans,
            thread_name="budget-processor",
            make_evaluator=Judges,  # each trace by its instrumentation's preset, as collect
        )
        self._core.start()

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None:
            return
        converted = span_from_sdk(span)
        local_root = span.parent is not None and span.parent.is_remote
        # Only a root can make a trace due sooner than the worker's next wake-up.
        if not self._core.offer(
            [HeldSpan(converted)],
            local_roots=(converted.span_id,) if local_root else (),
            wake=converted.parent_span_id is None or local_root,
        ):
            self.metrics.spans_rejected.labels("queue_full").inc()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Judge every held trace now, on the processor's thread (the callbacks run there);
        False when that took longer than `timeout_millis`."""
        return self._core.flush(timeout_millis / 1000)

    def shutdown(self) -> None:
        """Judge every held trace, then stop the processor's thread."""
        self._core.close()
