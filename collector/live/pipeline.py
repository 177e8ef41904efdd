"""The live collector, assembled in one place.

`assemble` reads the settings once and builds every part from its group of them, in the
order the data flows: the intake (`settings.intake`), the judging core with its
tail-based assembly (`.assembly`), then the core's sinks in the order they get each step
— the verdict store and the kept spans (`.store`), the metrics, any sinks a caller adds,
the burn-rate alerts (`.alerts`), the forwarder (`.forward`), the journal's trimming.
A span's way through it: `intake.http` (POST /v1/traces) → `intake.receiver.Intake` →
`core.JudgingCore.offer` → `core.assembly.Assembly` → `judging.evaluate.Evaluator` → the
sinks. Nothing here blocks the request path.

`app.app_for` serves a `Pipeline` over HTTP; `spanbudget collect` (`cli.run`) starts and
closes one. What only passes a call on is not wrapped: callers reach `pipeline.core`
(offer, ready, wait_idle, the current budget) directly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from ..alerts.budgets import BudgetAlerts
from ..alerts.sinks import Dispatcher
from ..budget.loader import BudgetError, load_budget
from ..budget.model import Budget
from ..context import EngineSamples, annotate_with
from ..core.assembly import Assembly
from ..core.decisions import VerdictSink
from ..core.judging_core import JudgingCore
from ..core.metrics import CollectorMetrics, MetricsSink
from ..intake.grpc_server import GrpcIntake, GrpcTls
from ..intake.jaeger_pull import JaegerPull
from ..intake.journal import Journal, JournalSink
from ..intake.receiver import Intake
from ..judging.auto import Judges
from ..judging.evaluate import Judge
from ..readers import read_jaeger_api
from ..readers.span_records import SpanReader
from ..sinks.alerting import AlertsSink, build_alerts
from ..sinks.forward import Forwarder
from ..sinks.span_store import SpanSink, SpanStore
from ..sinks.store import StoreSink, VerdictStore
from .engine_metrics import EngineScraper
from .gc_settings import collect_between_steps
from .settings import CollectorSettings

__all__ = ["Pipeline", "assemble"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Pipeline:
    """One assembled collector: its parts, for the HTTP app and for whoever runs it."""

    settings: CollectorSettings
    intake: Intake
    core: JudgingCore
    metrics: CollectorMetrics
    store: VerdictStore
    spans: SpanStore | None  # the judged traces' spans, for the web UI's trace page
    alerts: BudgetAlerts | None  # the burn-rate rules, None without them
    dispatcher: Dispatcher | None  # sends the rules' alerts to the log, Alertmanager, a webhook
    forwarder: Forwarder | None
    pull: JaegerPull | None = None  # traces other collectors sent to Jaeger, judged here
    engine_scraper: EngineScraper | None = None  # the engine's state, for the verdicts
    grpc: GrpcIntake | None = None  # OTLP/gRPC beside OTLP/HTTP; the app starts it

    def start(self) -> None:
        """Start the core's worker, offer it what the journal kept from before a restart,
        then start the alert rules' timer, the pull from Jaeger and the engine's scrape."""
        if self.engine_scraper is not None:
            self.engine_scraper.start()
        self.core.start()
        self.intake.replay_journal()
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
        the forwarder drains for up to its shutdown drain), then the alerts."""
        if self.pull is not None:
            self.pull.close()
        self.intake.close()
        self.core.close()
        if self.alerts is not None:
            self.alerts.close()
        if self.dispatcher is not None:
            self.dispatcher.close()
        if self.engine_scraper is not None:
            self.engine_scraper.close()


def assemble(
    settings: CollectorSettings,
    budget: Budget,
    *,
    registry: CollectorRegistry | None = None,
    alerts: bool = True,
    sinks: Sequence[VerdictSink] = (),
    clock: Callable[[], float] = time.monotonic,
    make_evaluator: Callable[[Budget], Judge] = Judges,
    reader: SpanReader | None = None,
) -> Pipeline:
    """The collector `settings` describe, judging against `budget`; not started.

    `alerts=False` leaves the burn-rate rules out (no `/api/alerts`); `sinks` are extra
    verdict sinks (tests, benches) placed before the alerts and the forwarder. `reader`
    reads the intake's protobuf bodies (`Intake`'s default: the compiled wire reader).

    Traces already in the store count as decided, so a straggler of a trace judged before
    a restart is a late span, not a second judgement, forwarded if its trace was.
    """
    metrics = CollectorMetrics(registry or CollectorRegistry())
    stored = settings.store
    store = VerdictStore(
        stored.db_path,
        retention_seconds=stored.retention_seconds,
        retention_count=stored.retention_count,
    )
    spans = SpanStore.from_settings(stored)
    forwarder = Forwarder.from_settings(
        settings.forward, metrics, memory=settings.assembly.decided_memory
    )
    journal_path = settings.journal_path
    journal = Journal(journal_path) if journal_path is not None else None
    engine = dispatcher = None
    if alerts:
        engine, dispatcher = build_alerts(
            settings.alerts,
            budget,
            metrics,
            ui_url=settings.public_base_url,
            jaeger_ui=settings.jaeger_ui,
            state_path=settings.alert_state_path,
            history=store.judged_since,
        )
    scraper = None
    if settings.engine.url is not None:
        every = settings.engine.every_seconds
        scraper = EngineScraper(
            settings.engine.url,
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
        assembly=Assembly.from_settings(settings.assembly),
        metrics=metrics,
        max_queue_spans=settings.intake.queue_spans,
        clock=clock,
        make_evaluator=make_evaluator,
        annotate=None if scraper is None else annotate_with(scraper.samples),
        between_steps=collect_between_steps,
    )
    if journal is not None:  # it keeps their spans: judged whole after the next start
        core.defer_rootless()
    recent = store.recent_statuses(settings.assembly.decided_memory)
    core.remember(trace_id for trace_id, _ in recent)
    if forwarder is not None:  # so that late spans of kept traces follow them
        forwarder.policy.remember(recent)
    intake = Intake(
        settings.intake,
        core,
        metrics,
        max_spans_per_trace=settings.assembly.max_spans_per_trace,
        journal=journal,
        known=store.known,
        originals=forwarder is not None,
        reader=reader,
    )
    pull = None
    if settings.pull.jaeger is not None and settings.pull.service is not None:
        pull = JaegerPull.from_settings(
            settings.pull,
            core,
            store,
            lambda url, service, since, limit: read_jaeger_api(url, service, since, limit=limit),
            memory=settings.assembly.decided_memory,
        )
    grpc = None
    if settings.intake.grpc_on:
        tls = settings.intake
        grpc = GrpcIntake(
            intake,
            tls.grpc_listen,
            tls=None
            if tls.grpc_tls_cert is None or tls.grpc_tls_key is None
            else GrpcTls(tls.grpc_tls_cert, tls.grpc_tls_key),
            required=tls.grpc_listen_given,
        )
    return Pipeline(
        settings,
        intake,
        core,
        metrics,
        store,
        spans,
        engine,
        dispatcher,
        forwarder,
        pull,
        scraper,
        grpc,
    )
