"""The live collector, assembled in one place.

`assemble` reads the settings once and builds every part: the OTLP intake's limits, the
tail-based assembly, the judging core and the core's sinks, in the order they get each
step — the verdict store, the metrics, the kept spans, any sinks a caller adds, the
burn-rate alerts, then the forwarder. A span's way through it: `api` (POST /v1/traces) →
`Pipeline.decode` (`intake.decode_export`) → `JudgingCore.offer` → `assembly.Assembly` →
`judging.evaluate.Evaluator` → the sinks. Nothing here blocks the request path.

The HTTP app (`api.create_app`) serves a `Pipeline`; `spanbudget collect` (`cli.run`)
starts and closes one. What only passes a call on is not wrapped: callers reach
`pipeline.core` (offer, ready, wait_idle, the current budget) directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from spanbudget.collector.alerts.engine import AlertEngine, AlertSettings
from spanbudget.collector.alerts.persist import AlertStateFile
from spanbudget.collector.alerts.sinks import (
    AlertmanagerSink,
    AlertSink,
    Dispatcher,
    LogSink,
    WebhookSink,
)
from spanbudget.collector.budget.loader import BudgetError, load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.context import EngineSamples
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.live.alerting import AlertsSink
from spanbudget.collector.live.assembly import Assembly
from spanbudget.collector.live.core import JudgingCore
from spanbudget.collector.live.engine_metrics import EngineScraper, annotate_with
from spanbudget.collector.live.forward import Forwarder
from spanbudget.collector.live.held import HeldSpan
from spanbudget.collector.live.intake import QUEUE_FULL, Batch, IntakeError, decode_export
from spanbudget.collector.live.jaeger_pull import JaegerPull
from spanbudget.collector.live.journal import Journal, JournalSink
from spanbudget.collector.live.metrics import CollectorMetrics, MetricsSink
from spanbudget.collector.live.settings import CollectorSettings
from spanbudget.collector.live.sinks import VerdictSink
from spanbudget.collector.live.span_store import SpanSink, SpanStore
from spanbudget.collector.live.store import StoreSink, VerdictStore
from spanbudget.collector.readers import read_jaeger_api

__all__ = ["Pipeline", "assemble"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Pipeline:
    """One assembled collector: its judging core and the parts the HTTP app reads."""

    settings: CollectorSettings
    core: JudgingCore
    metrics: CollectorMetrics
    store: VerdictStore
    spans: SpanStore | None  # the judged traces' spans, for the web UI's trace page
    alerts: AlertEngine | None  # the burn-rate rules, None without them
    dispatcher: Dispatcher | None  # sends the rules' alerts to the log, Alertmanager, a webhook
    forwarder: Forwarder | None
    # Threads that decode large or compressed bodies off the HTTP server's event loop: a
    # few fixed ones, as every thread that allocates grows the process's malloc arenas.
    decoders: ThreadPoolExecutor
    journal: Journal | None  # accepted bodies until their traces are decided
    pull: JaegerPull | None = None  # traces other collectors sent to Jaeger, judged here
    engine_scraper: EngineScraper | None = None  # the engine's state, for the verdicts

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
            originals=self.forwarder is not None,
        )

    def receive(
        self, body: bytes, *, content_type: str | None, content_encoding: str | None
    ) -> Batch:
        """Take one `POST /v1/traces` body: decode it, write it to the journal, queue its
        spans for the core. Raises `IntakeError`: 4xx for the body, 413 for more spans than
        the queue could ever hold, 503 (`queue_full`) when it is full now. Any thread."""
        batch = self.decode(body, content_type=content_type, content_encoding=content_encoding)
        metrics, spans = self.metrics, batch.spans
        if batch.rejected:
            metrics.spans_rejected.labels("span_too_large").inc(batch.rejected)
        per_trace = self.settings.max_spans_per_trace
        if len(spans) > per_trace:  # one trace may hold more than its bound: refuse the rest
            spans = _within_trace_bound(batch, per_trace)
            metrics.spans_rejected.labels("trace_span_limit").inc(len(batch.spans) - len(spans))
            batch.spans = spans
        limit = self.settings.intake_queue_spans
        if len(spans) > limit:  # it could never fit, however long the client waits
            metrics.spans_rejected.labels("too_many_spans").inc(len(spans))
            raise IntakeError(
                413,
                "too_many_spans",
                f"{len(spans)} spans in one request; at most {limit}: split the batch",
            )
        journal, seq = self.journal, None
        if journal is not None and spans:  # registered before the core can decide them
            seq = journal.append(
                body,
                {held.span.trace_id for held in spans},
                content_type=content_type,
                content_encoding=content_encoding,
            )
        if not self.core.offer(spans, lost=batch.lost):
            if seq is not None:
                journal.cancel(seq)  # type: ignore[union-attr]
            metrics.spans_rejected.labels("queue_full").inc(len(spans))
            raise IntakeError(503, "queue_full", QUEUE_FULL)
        metrics.spans_received.inc(len(spans))
        return batch

    def replay_journal(self) -> int:
        """Offer again what the journal holds from before a restart (the spans of traces
        not yet in the verdict store), waiting for room in the queue; return the spans.
        After `start`, before the HTTP server takes requests."""
        journal = self.journal
        if journal is None:
            return 0
        replayed = 0
        for entry in journal.entries():
            try:
                batch = self.decode(
                    entry.body,
                    content_type=entry.content_type,
                    content_encoding=entry.content_encoding,
                )
            except IntakeError:  # it was accepted once; a journal from another version
                journal.track(entry.seq, ())
                continue
            judged = self.store.known({held.span.trace_id for held in batch.spans})
            spans = [held for held in batch.spans if held.span.trace_id not in judged]
            journal.track(entry.seq, {held.span.trace_id for held in spans})
            while spans and not self.core.offer(spans, lost=batch.lost):
                time.sleep(0.05)
            replayed += len(spans)
        if replayed:
            self.metrics.spans_received.inc(replayed)
            log.warning(
                "intake journal: %d acknowledged span(s) from before a restart offered again",
                replayed,
            )
        return replayed

    def start(self) -> None:
        """Start the core's worker, offer it what the journal kept from before a restart,
        then start the alert rules' timer, the pull from Jaeger and the engine's scrape."""
        if self.engine_scraper is not None:
            self.engine_scraper.start()
        self.core.start()
        self.replay_journal()
        if self.alerts is not None:
            self.alerts.start()
        if self.pull is not None:
            self.pull.start()

    def reload_budget(self, path: Path) -> bool:
        """Validate `path` and switch to it; on error keep the current budget. Logs which.
        The core owns the budget; the alert rules follow it with the next step."""
        try:
            loaded = load_budget(path)
        except (BudgetError, OSError) as exc:
            self.metrics.budget_reloads.labels("error").inc()
            log.error("budget reload failed, keeping %r: %s", self.core.budget.name, exc)
            return False
        for warning in loaded.warnings:
            log.warning("budget %s: %s", path, warning)
        self.core.set_budget(loaded.budget)
        self.metrics.budget_reloads.labels("ok").inc()
        log.info("budget reloaded from %s: %r", path, loaded.budget.name)
        return True

    def close(self) -> None:
        """Refuse new spans, judge everything held now, close the sinks (the stores close,
        the forwarder drains for up to `shutdown_drain_seconds`), then the alerts."""
        if self.pull is not None:
            self.pull.close()
        self.decoders.shutdown(wait=True)
        self.core.close()
        if self.alerts is not None:
            self.alerts.close()
        if self.dispatcher is not None:
            self.dispatcher.close()
        if self.engine_scraper is not None:
            self.engine_scraper.close()


def _within_trace_bound(batch: Batch, per_trace: int) -> list[HeldSpan]:
    """The batch's spans less those past `per_trace` in their trace, which are counted in
    `batch.rejected` (the answer's partial success) and `batch.lost` (the trace's damage)."""
    counts: dict[str, int] = {}
    kept: list[HeldSpan] = []
    for held in batch.spans:
        trace_id = held.span.trace_id
        n = counts.get(trace_id, 0) + 1
        counts[trace_id] = n
        if n <= per_trace:
            kept.append(held)
    for trace_id, n in counts.items():
        if n > per_trace:
            reasons = batch.lost.setdefault(trace_id, {})
            reasons["trace_span_limit"] = reasons.get("trace_span_limit", 0) + n - per_trace
            batch.rejected += n - per_trace
    return kept


def assemble(
    settings: CollectorSettings,
    budget: Budget,
    *,
    registry: CollectorRegistry | None = None,
    alerts: bool = True,
    sinks: Sequence[VerdictSink] = (),
    clock: Callable[[], float] = time.monotonic,
    make_evaluator: Callable[[Budget], Evaluator] = Evaluator,
) -> Pipeline:
    """The collector `settings` describe, judging against `budget`; not started.

    `alerts=False` leaves the burn-rate rules out (no `/api/alerts`); `sinks` are extra
    verdict sinks (tests, benches) placed before the alerts and the forwarder.

    Traces already in the store count as decided, so a straggler of a trace judged before
    a restart is a late span, not a second judgement, forwarded if its trace was.
    """
    metrics = CollectorMetrics(registry or CollectorRegistry())
    store = VerdictStore(
        settings.db_path,
        retention_seconds=settings.retention_seconds,
        retention_count=settings.retention_count,
    )
    spans = SpanStore.from_settings(settings)
    forwarder = Forwarder.from_settings(settings, metrics)
    journal_path = settings.journal_path
    journal = Journal(journal_path) if journal_path is not None else None
    engine = dispatcher = None
    state_path = settings.alert_state_path
    if alerts:  # the log always; Alertmanager and the webhook when their URLs are given
        alert_sinks: list[AlertSink] = [LogSink()]
        if settings.alertmanager:
            alert_sinks.append(
                AlertmanagerSink(settings.alertmanager, resend_s=settings.alert_resend_seconds)
            )
        if settings.webhook:
            alert_sinks.append(WebhookSink(settings.webhook))
        dispatcher = Dispatcher(
            alert_sinks, on_failure=lambda sink: metrics.export_failures.labels(sink).inc()
        )
        engine = AlertEngine(
            budget,
            dispatcher.send,
            AlertSettings(
                window_scale=settings.alert_window_scale,
                min_judged=settings.alert_min_traces,
                min_overruns=settings.alert_min_overruns,
                resend_s=settings.alert_resend_seconds,
                tick_s=settings.alert_tick_seconds,
                ui_url=settings.public_base_url,
                jaeger_ui=settings.jaeger_ui or "",
            ),
            state=None if state_path is None else AlertStateFile(state_path),
        )
        # As after a Prometheus restart: the windows see again what they saw, a firing
        # alert stays the same alert (no second page), a pending rule keeps its clock.
        engine.restore(store.judged_since(time.time() - engine.history_s, budget.name))
    scraper = None
    if settings.engine_metrics is not None:
        every = settings.engine_metrics_every_seconds
        scraper = EngineScraper(
            settings.engine_metrics,
            # Ten minutes of scrapes: verdicts come at most max_trace_age after arrival.
            EngineSamples(keep=max(60, round(600 / every)), max_age_ns=round(3 * every * 1e9)),
            every_s=every,
            on_failure=metrics.engine_scrape_failures.inc,
        )
    core = JudgingCore(
        budget,
        [
            StoreSink(store),
            MetricsSink(metrics),
            *([SpanSink(spans, metrics)] if spans is not None else []),
            *sinks,
            *([AlertsSink(engine)] if engine is not None else []),
            *([forwarder] if forwarder is not None else []),
            *([JournalSink(journal)] if journal is not None else []),
        ],
        assembly=Assembly(
            decision_wait=settings.decision_wait_seconds,
            max_age=settings.max_trace_age_seconds,
            max_traces=settings.max_traces,
            max_spans_per_trace=settings.max_spans_per_trace,
            decided_memory=settings.decided_memory,
            max_spans=settings.max_buffered_spans,
            revise_seconds=settings.revise_seconds,
            revise_spans=settings.revise_spans,
        ),
        metrics=metrics,
        max_queue_spans=settings.intake_queue_spans,
        clock=clock,
        make_evaluator=make_evaluator,
        annotate=annotate_with(None if scraper is None else scraper.samples),
    )
    recent = store.recent_statuses(settings.decided_memory)
    core.remember(trace_id for trace_id, _ in recent)
    if forwarder is not None:  # so that late spans of kept traces follow them
        forwarder.policy.remember(recent)
    pull = None
    if settings.pull_jaeger is not None and settings.pull_service is not None:
        pull = JaegerPull(
            core,
            store,
            lambda url, service, since, limit: read_jaeger_api(url, service, since, limit=limit),
            url=settings.pull_jaeger,
            service=settings.pull_service,
            every_s=settings.pull_every_seconds,
            window_s=settings.pull_window_seconds,
            settle_s=settings.pull_settle_seconds,
            limit=settings.pull_limit,
            memory=settings.decided_memory,
        )
    decoders = ThreadPoolExecutor(settings.intake_decoders, thread_name_prefix="spanbudget-decode")
    return Pipeline(
        settings,
        core,
        metrics,
        store,
        spans,
        engine,
        dispatcher,
        forwarder,
        decoders,
        journal,
        pull,
        scraper,
    )
