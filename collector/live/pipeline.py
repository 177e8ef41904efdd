"""The live collector behind its HTTP app: OTLP intake feeds one judging core, whose sinks
are the verdict store, the metrics, forwarding when asked for, and any others given (the
alerts). Nothing here blocks the request path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from spanbudget.collector.budget.loader import BudgetError, load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.live.assembly import Assembly
from spanbudget.collector.live.core import JudgingCore
from spanbudget.collector.live.forward import Forwarder
from spanbudget.collector.live.intake import Batch, decode_export
from spanbudget.collector.live.metrics import CollectorMetrics, MetricsSink
from spanbudget.collector.live.settings import CollectorSettings
from spanbudget.collector.live.sinks import VerdictSink
from spanbudget.collector.live.span_store import SpanSink, SpanStore
from spanbudget.collector.live.store import StoreSink, VerdictStore

__all__ = ["Pipeline"]

log = logging.getLogger(__name__)


class Pipeline:
    """The collector's judging core, bounded by its settings, with its sinks in the order
    they get each step: the store, the metrics, `sinks`, then the forwarder.

    Traces already in the store count as decided, so a straggler of a trace judged before
    a restart is a late span, not a second judgement, forwarded if its trace was.
    """

    def __init__(
        self,
        settings: CollectorSettings,
        budget: Budget,
        *,
        metrics: CollectorMetrics,
        store: VerdictStore,
        forwarder: Forwarder | None = None,
        sinks: Sequence[VerdictSink] = (),
        spans: SpanStore | None = None,
        clock: Callable[[], float] = time.monotonic,
        make_evaluator: Callable[[Budget], Evaluator] = Evaluator,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.store = store
        self.spans = spans  # the judged traces' spans, for the web UI's trace page
        self._forwards = forwarder is not None
        assembly = Assembly(
            decision_wait=settings.decision_wait_seconds,
            max_age=settings.max_trace_age_seconds,
            max_traces=settings.max_traces,
            max_spans_per_trace=settings.max_spans_per_trace,
            decided_memory=settings.decided_memory,
            max_spans=settings.max_buffered_spans,
        )
        self.core = JudgingCore(
            budget,
            [
                StoreSink(store),
                MetricsSink(metrics),
                *([SpanSink(spans, metrics)] if spans is not None else []),
                *sinks,
                *([forwarder] if forwarder else []),
            ],
            assembly=assembly,
            metrics=metrics,
            max_queue_spans=settings.intake_queue_spans,
            clock=clock,
            make_evaluator=make_evaluator,
        )
        recent = store.recent_statuses(settings.decided_memory)
        self.core.remember(trace_id for trace_id, _ in recent)
        if forwarder is not None:  # so that late spans of kept traces follow them
            forwarder.policy.remember(recent)

    @property
    def budget(self) -> Budget:
        return self.core.budget

    def start(self) -> None:
        self.core.start()

    def ready(self) -> bool:
        return self.core.ready()

    def decode(
        self, body: bytes, *, content_type: str | None, content_encoding: str | None
    ) -> Batch:
        """Decode a `POST /v1/traces` body within the settings' limits (raises
        `IntakeError`); its spans keep their OTLP originals when the collector forwards."""
        return decode_export(
            body,
            content_type=content_type,
            content_encoding=content_encoding,
            max_body_bytes=self.settings.max_body_bytes,
            max_span_bytes=self.settings.max_span_bytes,
            originals=self._forwards,
        )

    def offer(self, batch: Batch) -> bool:
        """Queue a decoded request for the worker; False when the queue is full or closing."""
        return self.core.offer(batch.spans)

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
        self.core.set_budget(loaded.budget)
        self.metrics.budget_reloads.labels("ok").inc()
        log.info("budget reloaded from %s: %r", path, loaded.budget.name)
        return True

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued span is assembled and no trace is held (tests, benches)."""
        return self.core.wait_idle(timeout)

    def close(self) -> None:
        """Refuse new spans, judge everything held now, then close the sinks: the stores
        close, the forwarder drains for up to `shutdown_drain_seconds`."""
        self.core.close()
