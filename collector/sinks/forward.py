"""Forwarding spans downstream over OTLP http/protobuf, annotated with their budget results.

`Forwarder` is a sink of the judging core: the spans of the traces its policy keeps
(`forward_policy.ForwardPolicy`; by default every trace) go on as they arrived, the spans
of judged traces with DESIGN §7's `budget.*` attributes added. A bounded queue off the
worker thread and one sender thread; retries with capped, jittered exponential backoff on
429, 5xx and connection errors, which new batches do not cut short. Spans are dropped only
when the queue is at its bound (or at shutdown, or when a `max_elapsed` is set and passes),
counted by reason, never raised. An outage logs one line when it starts and one when
delivery resumes, not one per attempt.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ..annotations import (
    BUDGET_BLAME,
    BUDGET_NAME,
    BUDGET_OVERRUN_MS,
    BUDGET_STAGE,
    BUDGET_STATUS,
    BUDGET_TTFT_MS,
)
from ..core.decisions import Decisions
from ..core.held import HeldSpan
from ..core.metrics import CollectorMetrics
from ..judging.evaluate import Judged
from .forward_policy import SAMPLED_OUT, ForwardPolicy
from .settings import ForwardSettings

__all__ = ["Forwarder", "annotate", "backoff_delay", "build_request"]

log = logging.getLogger(__name__)
SINK = "otlp"
_RETRYABLE = frozenset({429, 500, 502, 503, 504})
# 2**_MAX_DOUBLINGS times any sane base is past any sane cap: no float ever overflows.
_MAX_DOUBLINGS = 60


def backoff_delay(attempt: int, base: float, cap: float, *, asked: float = 0.0) -> float:
    """The wait before retry number `attempt + 1`: `base * 2**attempt` capped at `cap`, at
    least what the server `asked` for (Retry-After), without jitter. Any attempt count is
    fine: the exponent stops growing long before a float would overflow."""
    return max(asked, min(base * 2.0 ** min(attempt, _MAX_DOUBLINGS), cap))


def annotate(spans: Sequence[HeldSpan], judged: Judged) -> None:
    """Add DESIGN §7's `budget.*` attributes to a judged trace's OTLP originals, in place."""
    verdict = judged.verdict
    stages = {bytes.fromhex(k): v for k, v in judged.span_stages.items()}
    root = bytes.fromhex(judged.root_span_id)
    for held in spans:
        span = held.proto
        if span is None:
            continue
        span_id = span.span_id
        stage = stages.get(span_id)
        attributes = span.attributes
        if stage is not None:
            _put(attributes, BUDGET_STAGE).string_value = stage
        if span_id == root:
            _put(attributes, BUDGET_NAME).string_value = verdict.budget
            _put(attributes, BUDGET_STATUS).string_value = verdict.status.value
            if verdict.ttft_ms is not None:
                _put(attributes, BUDGET_TTFT_MS).double_value = verdict.ttft_ms
            blame = _put(attributes, BUDGET_BLAME).array_value
            blame.SetInParent()  # an empty blame is still an array, not a value left unset
            for name in verdict.blame:
                blame.values.add().string_value = name
            _put(attributes, BUDGET_OVERRUN_MS).double_value = verdict.overrun_ms


def _put(attributes: Any, key: str) -> Any:
    kv = attributes.add()
    kv.key = key
    return kv.value


def build_request(spans: Sequence[HeldSpan]) -> ExportTraceServiceRequest:
    """One export request of OTLP originals, grouped under their resource and scope."""
    request = ExportTraceServiceRequest()
    resources: dict[tuple[bytes, str], Any] = {}
    scopes: dict[tuple[bytes, str, bytes, str], Any] = {}
    keys: dict[int, tuple[bytes, str, bytes, str]] = {}
    for held in spans:
        origin = held.origin
        assert origin is not None  # the forwarder queues OTLP originals only
        key = keys.get(id(origin))
        if key is None:
            key = (
                origin.resource.SerializeToString(deterministic=True),
                origin.resource_schema_url,
                origin.scope.SerializeToString(deterministic=True),
                origin.scope_schema_url,
            )
            keys[id(origin)] = key
        scope_spans = scopes.get(key)
        if scope_spans is None:
            resource_spans = resources.get(key[:2])
            if resource_spans is None:
                resource_spans = request.resource_spans.add()
                resource_spans.resource.CopyFrom(origin.resource)
                resource_spans.schema_url = origin.resource_schema_url
                resources[key[:2]] = resource_spans
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.CopyFrom(origin.scope)
            scope_spans.schema_url = origin.scope_schema_url
            scopes[key] = scope_spans
        scope_spans.spans.append(held.proto)
    return request


class Forwarder:
    """Sends the held spans of the traces `policy` keeps (default: all) to one OTLP/HTTP
    traces URL from a background thread, counting each decision in `metrics`.

    `consume` (and `submit`) never block: spans beyond `max_queue_spans` are dropped and
    counted (`queue_full`). A batch is retried (exponential backoff with jitter, capped at
    `backoff_max`, `Retry-After` honoured) until it is delivered, refused with a
    non-retryable status (`rejected`), or — only when `max_elapsed` is set — that long has
    passed (`gave_up`); meanwhile the queue fills up to its bound. `close` keeps sending
    for up to `drain_seconds`, then drops (and counts, `shutdown`) the rest.
    """

    name = SINK

    @classmethod
    def from_settings(
        cls, settings: ForwardSettings, metrics: CollectorMetrics, *, memory: int
    ) -> Forwarder | None:
        """The forwarder `settings` ask for, or None when there is no `--forward-otlp`;
        its policy remembers `memory` kept traces, as the core remembers decided ones."""
        url = settings.traces_url
        if url is None:
            return None
        return cls(
            url,
            metrics,
            max_queue_spans=settings.queue_spans,
            batch_spans=settings.batch_spans,
            timeout=settings.timeout_seconds,
            backoff=settings.backoff_seconds,
            backoff_max=settings.backoff_max_seconds,
            max_elapsed=settings.max_elapsed_seconds,
            drain_seconds=settings.shutdown_drain_seconds,
            policy=ForwardPolicy(settings.keep_statuses, settings.sample, memory=memory),
        )

    def __init__(
        self,
        url: str,
        metrics: CollectorMetrics,
        *,
        max_queue_spans: int,
        batch_spans: int,
        timeout: float,
        backoff: float,
        backoff_max: float,
        max_elapsed: float | None = None,
        drain_seconds: float = 5.0,
        client: httpx.Client | None = None,
        policy: ForwardPolicy | None = None,
    ) -> None:
        self.url = url
        self.metrics = metrics
        self.policy = policy or ForwardPolicy()
        # The label sets the policy can produce, at zero from the start, looked up once.
        self._counters = {
            reason: (
                metrics.forward_traces.labels(_decision(reason), reason),
                metrics.forward_spans.labels(_decision(reason), reason),
            )
            for reason in self.policy.reasons()
        }
        self.max_queue_spans = max_queue_spans
        self.batch_spans = batch_spans
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.max_elapsed = max_elapsed
        self.drain_seconds = drain_seconds
        self._client = client or httpx.Client(timeout=timeout)
        self._queue: deque[HeldSpan] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._deadline = float("inf")
        self._outage: _Outage | None = None  # set while deliveries fail, for its two log lines
        self._thread = threading.Thread(target=self._run, name="spanbudget-forward", daemon=True)
        self._thread.start()

    def consume(self, decisions: Decisions) -> None:
        """Queue the spans of the step that the policy keeps: judged traces' annotated, the
        rest as they came; late spans follow their trace's decision."""
        policy = self.policy
        counters = self._counters
        spans: list[HeldSpan] = []
        for trace in decisions.traces:
            reason = policy.decide(trace)
            held = [h for h in trace.spans if h.proto is not None]
            traces_counter, spans_counter = counters[reason]
            traces_counter.inc()
            if held:
                spans_counter.inc(len(held))
            if reason == SAMPLED_OUT:
                continue
            if trace.judged is not None:
                annotate(held, trace.judged)
            spans += held
        late: dict[str, int] = {}
        for held_span in decisions.late:
            if held_span.proto is None:
                continue
            reason = policy.decide_late(held_span.span.trace_id)
            late[reason] = late.get(reason, 0) + 1
            if reason != SAMPLED_OUT:
                spans.append(held_span)
        for reason, n in late.items():
            counters[reason][1].inc(n)
        self.submit(spans)

    def submit(self, items: Sequence[HeldSpan]) -> None:
        if not items:
            return
        with self._cond:
            if self._closing or len(self._queue) + len(items) > self.max_queue_spans:
                self.metrics.forward_dropped.labels("queue_full").inc(len(items))
                return
            self._queue.extend(items)
            self.metrics.forward_queue_spans.set(len(self._queue))
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    def close(self) -> None:
        """Stop taking spans, keep sending for up to `drain_seconds`, drop (count) the rest."""
        drain_seconds = self.drain_seconds
        with self._cond:
            self._closing = True
            self._deadline = time.monotonic() + drain_seconds
            self._cond.notify()
        self._thread.join(drain_seconds + 5)
        with self._cond:
            if self._queue:
                self.metrics.forward_dropped.labels("shutdown").inc(len(self._queue))
                self._queue.clear()
        self._client.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue or time.monotonic() >= self._deadline:
                    return
                n = min(self.batch_spans, len(self._queue))
                batch = [self._queue.popleft() for _ in range(n)]
                self.metrics.forward_queue_spans.set(len(self._queue))
            try:
                self._deliver(batch)
            except Exception:  # the sender must outlive any single bad batch
                log.exception("forwarding a batch of %d spans failed", len(batch))
                self.metrics.forward_dropped.labels("rejected").inc(len(batch))

    def _deliver(self, batch: list[HeldSpan]) -> None:
        body = build_request(batch).SerializeToString()
        started = time.monotonic()
        attempt = 0
        while True:
            wait = self._attempt(body)
            if wait is None:
                self.metrics.spans_forwarded.inc(len(batch))
                self._recovered()
                return
            if wait < 0:
                self.metrics.forward_dropped.labels("rejected").inc(len(batch))
                return
            delay = backoff_delay(attempt, self.backoff, self.backoff_max, asked=wait)
            delay *= random.uniform(0.8, 1.2)
            attempt += 1
            now = time.monotonic()
            if now + delay > self._deadline:
                self.metrics.forward_dropped.labels("shutdown").inc(len(batch))
                return
            if self.max_elapsed is not None and now + delay - started > self.max_elapsed:
                self.metrics.forward_dropped.labels("gave_up").inc(len(batch))
                return
            self._sleep(now + delay)

    def _sleep(self, until: float) -> None:
        """Sleep until `until`; new batches do not cut it short, `close` does (to re-check
        the drain deadline)."""
        with self._cond:
            while not self._closing:
                left = until - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def _attempt(self, body: bytes) -> float | None:
        """None: delivered; -1: refused for good; else seconds the server asked us to wait."""
        try:
            response = self._client.post(
                self.url, content=body, headers={"Content-Type": "application/x-protobuf"}
            )
        except httpx.HTTPError as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
            return 0.0
        if response.status_code < 300:
            return None
        self._failed(f"HTTP {response.status_code}")
        if response.status_code not in _RETRYABLE:
            return -1
        return _retry_after(response.headers.get("retry-after"))

    def _failed(self, why: str) -> None:
        """Count a failed attempt; log it when it starts an outage, else only at debug."""
        self.metrics.export_failures.labels(SINK).inc()
        outage = self._outage
        if outage is None:
            self._outage = _Outage(time.monotonic())
            log.warning(
                "forward to %s failing (%s); retrying with backoff up to %gs, holding up to "
                "%d spans meanwhile",
                self.url,
                why,
                self.backoff_max,
                self.max_queue_spans,
            )
        else:
            outage.attempts += 1
            log.debug("forward to %s still failing (%s)", self.url, why)

    def _recovered(self) -> None:
        outage = self._outage
        if outage is None:
            return
        self._outage = None
        log.warning(
            "forward to %s delivering again after %.1fs and %d failed attempt(s)",
            self.url,
            time.monotonic() - outage.started,
            outage.attempts,
        )


@dataclass(slots=True)
class _Outage:
    started: float  # monotonic time of the first failed attempt
    attempts: int = 1


def _decision(reason: str) -> str:
    return "dropped" if reason == SAMPLED_OUT else "kept"


def _retry_after(value: str | None) -> float:
    try:
        return min(max(float(value or 0), 0.0), 60.0)
    except ValueError:
        return 0.0
