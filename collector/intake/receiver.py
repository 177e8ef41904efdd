"""From an accepted OTLP export body to the judging core, whatever carried it.

`Intake.receive` decodes a body within the limits (`otlp.decode_export`), refuses the
spans past a trace's bound, registers its traces with the journal before the core can
decide them, offers the spans to the core and, once it took them, writes the body to the
journal; the transport (`http.OtlpHttp`, `grpc_server.GrpcIntake`) answers with what it
returns or raises. `Intake.replay_journal` offers again, at start, what the last process
acknowledged and did not decide, and holds every trace for the replay wait: the rest of
those traces is on its way from the senders' retries, in any order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor

from ..core.held import HeldSpan
from ..core.judging_core import JudgingCore
from ..core.metrics import CollectorMetrics
from ..readers.span_records import AttributeKeys, SpanReader
from .admission import Admission, Throttle
from .journal import Journal
from .otlp import QUEUE_FULL, Batch, IntakeError, decode_export
from .settings import IntakeSettings

__all__ = ["Intake"]

log = logging.getLogger(__name__)


class Intake:
    """The collector's intake: its limits, the admission estimate, the senders told to
    wait, the journal, and the decoder threads the transports hand large or compressed
    bodies to.

    `known` answers which of some trace ids are judged already (the verdict store), for
    the journal's replay. `originals`: keep each span's OTLP original, which forwarding
    sends on. `max_spans_per_trace` is the assembly's bound, enforced here per request.
    `reader` reads protobuf bodies whose originals nobody keeps: by default the compiled
    wire reader where it was built, every attribute kept (the span store and the web UI
    show them); the protobuf package's messages otherwise.
    """

    def __init__(
        self,
        settings: IntakeSettings,
        core: JudgingCore,
        metrics: CollectorMetrics,
        *,
        max_spans_per_trace: int,
        journal: Journal | None = None,
        known: Callable[[Collection[str]], Collection[str]] = lambda ids: (),
        originals: bool = False,
        reader: SpanReader | None = None,
    ) -> None:
        self.settings = settings
        self.core = core
        self.metrics = metrics
        self.journal = journal
        self.max_spans_per_trace = max_spans_per_trace
        self._known = known
        self._originals = originals
        self.admission = Admission(core.queued, settings.queue_spans)
        self.throttle = Throttle(settings.retry_after_seconds)
        self.reader = reader or SpanReader(AttributeKeys(every=True))
        # Threads that decode large or compressed bodies off the HTTP server's event loop: a
        # few fixed ones, as every thread that allocates grows the process's malloc arenas.
        self.decoders = ThreadPoolExecutor(
            settings.decoders, thread_name_prefix="spanbudget-decode"
        )

    def decode(
        self, body: bytes, *, content_type: str | None, content_encoding: str | None
    ) -> Batch:
        """Decode an export body within the limits (raises `IntakeError`)."""
        return decode_export(
            body,
            content_type=content_type,
            content_encoding=content_encoding,
            max_body_bytes=self.settings.max_body_bytes,
            max_span_bytes=self.settings.max_span_bytes,
            originals=self._originals,
            reader=self.reader,
        )

    def receive(
        self, body: bytes, *, content_type: str | None, content_encoding: str | None
    ) -> Batch:
        """Take one export body: decode it, write it to the journal, queue its spans for
        the core. Raises `IntakeError`: 4xx for the body, 413 for more spans than the queue
        could ever hold, 503 (`queue_full`) when it is full now. Any thread."""
        batch = self.decode(body, content_type=content_type, content_encoding=content_encoding)
        metrics, spans = self.metrics, batch.spans
        if batch.rejected:
            metrics.spans_rejected.labels("span_too_large").inc(batch.rejected)
        per_trace = self.max_spans_per_trace
        if len(spans) > per_trace:  # one trace may hold more than its bound: refuse the rest
            spans = _within_trace_bound(batch, per_trace)
            metrics.spans_rejected.labels("trace_span_limit").inc(len(batch.spans) - len(spans))
            batch.spans = spans
        limit = self.settings.queue_spans
        if len(spans) > limit:  # it could never fit, however long the client waits
            metrics.spans_rejected.labels("too_many_spans").inc(len(spans))
            raise IntakeError(
                413,
                "too_many_spans",
                f"{len(spans)} spans in one request; at most {limit}: split the batch",
            )
        journal = self.journal if spans else None
        # Registered before the core can decide its traces; on disk before the answer, and
        # only once the core took the spans (a refused body is never written).
        seq = 0 if journal is None else journal.register({h.span.trace_id for h in spans})
        if not self.core.offer(spans, lost=batch.lost):
            if journal is not None:
                journal.cancel(seq)
            metrics.spans_rejected.labels("queue_full").inc(len(spans))
            raise IntakeError(503, "queue_full", QUEUE_FULL)
        if journal is not None:
            journal.write(seq, body, content_type=content_type, content_encoding=content_encoding)
        metrics.spans_received.inc(len(spans))
        return batch

    def replay_journal(self) -> int:
        """Offer again what the journal holds from before a restart (the spans of traces
        not yet judged), waiting for room in the queue; return the spans. After the core
        started, before a transport takes requests.

        Spans given back mean the last process stopped with traces in flight, whose other
        parts the senders hold and retry, each request on its own back-off: for the replay
        wait no trace is judged as complete, replayed or not, so that a root retried
        before its children is not judged without them."""
        journal = self.journal
        if journal is None:
            return 0
        replayed = 0
        wait = self.settings.replay_wait_seconds
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
            judged = self._known({held.span.trace_id for held in batch.spans})
            spans = [held for held in batch.spans if held.span.trace_id not in judged]
            journal.track(entry.seq, {held.span.trace_id for held in spans})
            if spans and not replayed and wait > 0:
                self.core.hold(wait)
            while spans and not self.core.offer(spans, lost=batch.lost):
                time.sleep(0.05)
            replayed += len(spans)
        if replayed:
            self.metrics.spans_received.inc(replayed)
            log.warning(
                "intake journal: %d acknowledged span(s) from before a restart offered again;"
                " no trace is judged as complete for the replay wait (%g s), while the"
                " senders' retries bring the rest",
                replayed,
                wait,
            )
        return replayed

    def close(self) -> None:
        """Finish the bodies being decoded; the core closes after."""
        self.decoders.shutdown(wait=True)


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
