"""Prometheus metrics of the collector (DESIGN §7), on an injected `CollectorRegistry`, and
`MetricsSink`, the judging core's sink that observes every verdict in them.

Histograms use budget-aware buckets and carry trace-id exemplars (shown in OpenMetrics).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import choose_encoder

from ..judging.verdict import Status, Verdict
from .decisions import Decisions
from .histogram import BatchHistogram

__all__ = ["BUDGET_BUCKETS_SECONDS", "CollectorMetrics", "MetricsSink", "render"]


def _buckets() -> tuple[float, ...]:
    fine = [ms / 1000 for ms in range(5, 61, 5)]  # every 5 ms to 60 ms
    mid = [ms / 1000 for ms in range(70, 301, 10)]  # every 10 ms to 300 ms
    coarse = [0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0]
    return (*fine, *mid, *coarse)


BUDGET_BUCKETS_SECONDS = _buckets()


class CollectorMetrics:
    """Every metric the collector exports; one instance per registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.stage_duration = BatchHistogram(
            "spanbudget_stage_duration_seconds",
            "Critical-path time of each budget stage per judged trace.",
            ["budget", "stage"],
            BUDGET_BUCKETS_SECONDS,
            registry,
        )
        self.ttft = BatchHistogram(
            "spanbudget_ttft_seconds",
            "Time to first token of each judged trace.",
            ["budget"],
            BUDGET_BUCKETS_SECONDS,
            registry,
        )
        self.traces = Counter(
            "spanbudget_traces",
            "Judged traces by verdict status.",
            ["budget", "status"],
            registry=registry,
        )
        self.stage_overruns = Counter(
            "spanbudget_stage_overruns",
            "Traces in which a stage went over its limit.",
            ["budget", "stage"],
            registry=registry,
        )
        self.spans_received = Counter(
            "spanbudget_spans_received", "Spans accepted at intake.", registry=registry
        )
        self.traces_skipped = Counter(
            "spanbudget_traces_skipped",
            "Traces that matched no stage (not judged).",
            registry=registry,
        )
        self.spans_rejected = Counter(
            "spanbudget_spans_rejected",
            "Spans refused: at intake (span_too_large, too_many_spans, queue_full when the"
            " queue filled while the body was decoded) or while assembling (duplicate,"
            " trace_span_limit). A request refused before decoding counts in"
            " spanbudget_requests_rejected_total only.",
            ["reason"],
            registry=registry,
        )
        self.traces_dropped = Counter(
            "spanbudget_traces_dropped",
            "Traces dropped unjudged: buffer_full (evicted, spans forwarded as they came),"
            " evaluation_error.",
            ["reason"],
            registry=registry,
        )
        self.spans_late = Counter(
            "spanbudget_spans_late",
            "Spans that arrived after their trace was decided.",
            registry=registry,
        )
        self.export_failures = Counter(
            "spanbudget_export_failures",
            "Failed export attempts by sink.",
            ["sink"],
            registry=registry,
        )
        self.engine_scrape_failures = Counter(
            "spanbudget_engine_scrape_failures",
            "Failed scrapes of the engine's metrics (--engine-metrics).",
            registry=registry,
        )
        self.spans_forwarded = Counter(
            "spanbudget_spans_forwarded",
            "Spans delivered downstream over OTLP.",
            registry=registry,
        )
        self.verdicts_revised = Counter(
            "spanbudget_verdicts_revised",
            "Verdicts judged again because late spans of their trace came within the"
            " revision horizon (the stored verdict is replaced).",
            registry=registry,
        )
        self.forward_dropped = Counter(
            "spanbudget_forward_spans_dropped",
            "Spans given up on by the forwarder (queue_full, rejected, gave_up, shutdown).",
            ["reason"],
            registry=registry,
        )
        self.forward_traces = Counter(
            "spanbudget_forward_traces",
            "Decided traces the forwarding policy kept or dropped: kept by all (no policy),"
            " status (in --forward-keep) or sampled; dropped sampled_out.",
            ["decision", "reason"],
            registry=registry,
        )
        self.forward_spans = Counter(
            "spanbudget_forward_spans",
            "Spans the forwarding policy kept (queued to send) or dropped, late spans"
            " included, by the same reasons as spanbudget_forward_traces_total.",
            ["decision", "reason"],
            registry=registry,
        )
        self.requests_rejected = Counter(
            "spanbudget_requests_rejected",
            "Intake requests answered 4xx/5xx, by reason (malformed ones count no spans).",
            ["reason"],
            registry=registry,
        )
        self.intake_requests = Counter(
            "spanbudget_intake_requests",
            "Export requests received, by transport (http: OTLP/HTTP, grpc: OTLP/gRPC) and"
            " outcome (accepted, or the reason it was refused).",
            ["transport", "outcome"],
            registry=registry,
        )
        self.intake_spans = Counter(
            "spanbudget_intake_spans",
            "Spans accepted at intake, by transport (their sum is"
            " spanbudget_spans_received_total less the journal's replays).",
            ["transport"],
            registry=registry,
        )
        self.intake_queue_spans = Gauge(
            "spanbudget_intake_queue_spans", "Spans waiting for the worker.", registry=registry
        )
        self.buffered_traces = Gauge(
            "spanbudget_buffered_traces", "Traces held for a decision.", registry=registry
        )
        self.forward_queue_spans = Gauge(
            "spanbudget_forward_queue_spans", "Spans waiting to be forwarded.", registry=registry
        )
        self._children: dict[tuple[object, ...], Any] = {}
        self.budget_reloads = Counter(
            "spanbudget_budget_reloads",
            "Budget reloads by result (ok, error).",
            ["result"],
            registry=registry,
        )

    def observe(self, verdict: Verdict) -> None:
        """Record one judged trace, with its id as the exemplar."""
        self.observe_all([verdict])

    def observe_all(self, verdicts: Sequence[Verdict]) -> None:
        """Record judged traces in order, as `observe` one by one would.

        A counter keeps only the last exemplar given to it, so only the last overrun of
        each carries one: the exposition is the same, without validating an exemplar per
        observation. The histograms take each label set's values at once.
        """
        observed: dict[tuple[Any, ...], list[tuple[float, str]]] = {}
        counted: dict[tuple[Any, ...], int] = {}
        overrun: dict[tuple[Any, ...], tuple[int, str]] = {}
        for verdict in verdicts:
            budget, trace_id = verdict.budget, verdict.trace_id
            key: tuple[Any, ...] = (self.traces, budget, verdict.status._value_)
            counted[key] = counted.get(key, 0) + 1
            if verdict.ttft_ms is None:
                continue  # no window: its stages' times cover the whole request
            observed.setdefault((self.ttft, budget), []).append((verdict.ttft_ms / 1000, trace_id))
            for stage in verdict.stages:
                if stage.ms is None:
                    continue
                observed.setdefault((self.stage_duration, budget, stage.name), []).append(
                    (stage.ms / 1000, trace_id)
                )
                if stage.status is Status.OVERRUN:
                    key = (self.stage_overruns, budget, stage.name)
                    overrun[key] = (overrun.get(key, (0, ""))[0] + 1, trace_id)
        for (metric, *labels), count in counted.items():
            self._child(metric, *labels).inc(count)
        for (histogram, *labels), values in observed.items():
            histogram.observe(tuple(labels), values)
        for (metric, *labels), (count, trace_id) in overrun.items():
            child = self._child(metric, *labels)
            if count > 1:
                child.inc(count - 1)
            child.inc(exemplar={"trace_id": trace_id})

    def _child(self, metric: Any, *labels: str) -> Any:
        # `labels()` validates and locks on every call; the label sets here are few and
        # fixed by the budget, so the children are looked up once.
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child


class MetricsSink:
    """Each judged verdict into the stage and TTFT histograms and the trace counters."""

    name = "metrics"

    def __init__(self, metrics: CollectorMetrics) -> None:
        self.metrics = metrics

    def consume(self, decisions: Decisions) -> None:
        self.metrics.observe_all(decisions.verdicts())

    def close(self) -> None:
        return None


def render(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """Exposition in the format the scraper asked for: OpenMetrics (with exemplars) or text."""
    encoder: Callable[[CollectorRegistry], bytes]
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
