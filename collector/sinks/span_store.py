"""The spans of judged traces, kept so that the web UI can draw a trace's waterfall.

SQLite in WAL mode in a file of its own (the verdict store's writer never waits on it),
one compressed row per trace (LZ4: a fifth of zlib's time on the hot path, for a third
more bytes; see `encode_spans`), bounded three ways: by trace count, by stored bytes and by
age. The oldest traces go first. Only spans are kept: critical path and exclusive times
are re-derived from them by the pure evaluator when a page asks.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import lz4.block

from .. import json_text
from ..core.decisions import Decisions, Retention
from ..core.metrics import CollectorMetrics
from ..readers.span_records import compiled_span_rows
from ..spans import Span, SpanEvent, SpanKind
from .settings import StoreSettings
from .store import connect, insert_rows

__all__ = ["SpanSink", "SpanStore", "decode_spans", "encode_spans", "span_rows"]

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS trace_spans (
    seq INTEGER PRIMARY KEY,
    trace_id TEXT NOT NULL UNIQUE,
    stored_at REAL NOT NULL,
    bytes INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS trace_spans_time ON trace_spans (stored_at);
"""
# The first element of every stored body, to read old rows after a change: format 2 added
# each span's host, format 3 its events and its instrumentation scope (the marks of
# instrumentations that put the first token in an event, and what recognises them);
# older rows are read without them.
_FORMAT = 3
_FORMATS = (1, 2, 3)
# A body starting with this byte is LZ4 (a block with its size first); the rows written
# before it are zlib streams, whose first byte is 0x78 at the window size we used.
_LZ4 = b"L"
_COMPILED_ROWS = compiled_span_rows()


def encode_spans(spans: Sequence[Span]) -> bytes:
    """One trace's spans as compressed JSON (a trace of 11 spans: 2.2 KB of JSON, 0.9 KB
    stored). JSON has no NaN nor infinity: a double attribute that is one is stored as null.

    LZ4, not zlib: on that trace LZ4 compresses in 1.4 µs to 899 bytes, zlib's fastest
    level in 8.0 µs to 672, zstd's level 1 in 4.8 µs to 646 (measured side by side here);
    the span store's writes are the collector's hot path, its bytes a bounded file."""
    rows = span_rows(spans)
    compressed: bytes = lz4.block.compress(json_text.dumps([_FORMAT, spans[0].trace_id, rows]))
    return _LZ4 + compressed


def span_rows(spans: Sequence[Span], *, compiled: bool = True) -> list[list[Any]]:
    """What `encode_spans` writes of each span, in order; made in C where the compiled
    reader is built (`span_records.compiled_span_rows`: 2.8 -> 1.4 µs a 12-span trace),
    unless `compiled` is False: tests hold the two equal."""
    if compiled and _COMPILED_ROWS is not None and type(spans) is list:
        made = _COMPILED_ROWS(spans)
        if made is not None:  # None: not every span is a `Span` itself
            return made
    return [
        [
            s.span_id,
            s.parent_span_id,
            s.name,
            s.start_ns,
            s.end_ns,
            s.kind._value_,  # its value (what orjson would write, through a property)
            s.service,
            s.attributes if type(s.attributes) is dict else _as_dict(s.attributes),
            s.error,
            s.host,
            [list(event) for event in s.events] if s.events else (),
            s.scope,
        ]
        for s in spans
    ]


def _as_dict(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """A span's attributes as a dict: the wire reader's compact mapping copies itself into
    one (its `copy`, in C) in a third of the time `dict(mapping)` takes to read it."""
    copy = getattr(attributes, "copy", None)
    copied = None if copy is None else copy()
    return copied if type(copied) is dict else dict(attributes)


def decode_spans(body: bytes) -> list[Span]:
    """The spans `encode_spans` stored, by this release or an earlier one (zlib)."""
    text = lz4.block.decompress(body[1:]) if body[:1] == _LZ4 else zlib.decompress(body)
    version, trace_id, rows = json.loads(text)
    if version not in _FORMATS:
        raise ValueError(f"unknown span body format {version!r}")
    return [
        Span(
            trace_id=trace_id,
            span_id=span_id,
            name=name,
            start_ns=start,
            end_ns=end,
            parent_span_id=parent,
            kind=SpanKind(kind),
            service=service,
            attributes={k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()},
            error=error,
            host=later[0] if later else None,
            events=tuple(SpanEvent(n, t) for n, t in later[1]) if len(later) > 1 else (),
            scope=later[2] if len(later) > 2 else None,
        )
        for span_id, parent, name, start, end, kind, service, attrs, error, *later in rows
    ]


class SpanStore:
    """Spans by trace id, newest kept; `get` from any thread.

    The collector's worker hands traces over with `keep`, which never blocks: a thread of
    the store's own encodes and writes them (at most `max_pending` traces wait; beyond
    that they are dropped and counted in `dropped`), so a slow disk never holds up
    judging. `write` is the same, synchronously, for one thread that owns the store.
    `max_traces` and `max_bytes` hold after every write; age (`retention_seconds`) is
    applied by `prune`, which the collector runs with the verdict store's.
    """

    max_pending = 20_000

    def __init__(
        self, path: Path, *, retention_seconds: float, max_traces: int, max_bytes: int
    ) -> None:
        self.path = path
        self.retention_seconds = retention_seconds
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = connect(self.path)
        self._writer.executescript(_SCHEMA)
        self._reader = connect(self.path)
        self._read_lock = threading.Lock()
        row = self._writer.execute(
            "SELECT COALESCE(MAX(seq), 0), COUNT(*), COALESCE(SUM(bytes), 0) FROM trace_spans"
        ).fetchone()
        self._next_seq = int(row[0]) + 1
        self._count = int(row[1])
        self._bytes = int(row[2])
        self.dropped = 0  # traces `keep` could not queue
        self._jobs: deque[list[Sequence[Span]] | float] = deque()  # traces, or a prune time
        self._pending = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> SpanStore | None:
        """The store the settings ask for, or None when they keep no spans."""
        if settings.span_retention_count == 0:
            return None
        return cls(
            settings.spans_path,
            retention_seconds=settings.retention_seconds,
            max_traces=settings.span_retention_count,
            max_bytes=settings.span_retention_bytes,
        )

    @property
    def count(self) -> int:
        return self._count

    @property
    def stored_bytes(self) -> int:
        return self._bytes

    def close(self) -> None:
        """Write what is queued, stop the thread, close the database."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
        self._writer.close()
        with self._read_lock:
            self._reader.close()

    def keep(self, traces: Sequence[Sequence[Span]], *, replace: bool = False) -> int:
        """Queue traces for the store's thread; returns how many were dropped (queue full).
        With `replace`, a trace kept already is replaced (its verdict was revised)."""
        with self._cond:
            room = max(0, self.max_pending - self._pending)
            taken = (_Replacing if replace else list)(traces[:room])
            lost = len(traces) - len(taken)
            self.dropped += lost
            if taken and not self._closing:
                self._jobs.append(taken)
                self._pending += len(taken)
                self._start()
                self._cond.notify()
        return lost

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued trace is written (tests, benches)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._jobs or self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="span-store", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closing:
                    self._cond.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            try:
                if isinstance(job, float):
                    self._prune_now(job)
                else:
                    self.write(job, replace=isinstance(job, _Replacing))
            except Exception:  # a full disk loses these waterfalls, never the thread
                log.exception("keeping spans failed")
                if not isinstance(job, float):
                    with self._cond:
                        self.dropped += len(job)
            finally:
                with self._cond:
                    if not isinstance(job, float):
                        self._pending -= len(job)
                    self._cond.notify_all()

    def write(
        self, traces: Sequence[Sequence[Span]], now: float | None = None, *, replace: bool = False
    ) -> None:
        """Keep each trace's spans (a trace already kept stays as it is, unless `replace`),
        then the bounds."""
        stored_at = time.time() if now is None else now
        rows: list[tuple[Any, ...]] = []
        for spans in traces:
            if not spans:
                continue
            body = encode_spans(spans)
            rows.append((self._next_seq, spans[0].trace_id, stored_at, len(body), body))
            self._next_seq += 1
        if not rows:
            return
        writer = self._writer
        writer.execute("BEGIN")
        try:
            before = writer.total_changes
            verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
            insert_rows(
                writer,
                f"{verb} INTO trace_spans (seq, trace_id, stored_at, bytes, body) VALUES",
                rows,
            )
            if not replace and writer.total_changes - before == len(rows):
                self._count += len(rows)
                self._bytes += sum(r[3] for r in rows)
            else:  # some were kept already: count again rather than guess which
                self._recount()
            self._bound()
            writer.execute("COMMIT")
        except BaseException:
            writer.execute("ROLLBACK")
            self._recount()
            raise

    def _recount(self) -> None:
        row = self._writer.execute(
            "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM trace_spans"
        ).fetchone()
        self._count, self._bytes = int(row[0]), int(row[1])

    def _delete(self, where: str, params: tuple[Any, ...]) -> int:
        """Delete rows, keeping the running count and bytes without a scan."""
        sizes = self._writer.execute(
            f"DELETE FROM trace_spans WHERE {where} RETURNING bytes", params
        ).fetchall()
        self._count -= len(sizes)
        self._bytes -= sum(size for (size,) in sizes)
        return len(sizes)

    def _bound(self) -> None:
        """Drop the oldest traces until both the count and the byte bound hold."""
        if self._count > self.max_traces:
            self._delete("seq <= ?", (self._next_seq - 1 - self.max_traces,))
        while self._bytes > self.max_bytes and self._count:
            # As many of the oldest as the excess over the average size: one or two rounds.
            average = self._bytes / self._count
            step = max(1, math.ceil((self._bytes - self.max_bytes) / average))
            self._delete("seq IN (SELECT seq FROM trace_spans ORDER BY seq LIMIT ?)", (step,))

    def prune(self, now: float) -> int:
        """Drop traces kept longer than the retention; returns how many (0 when the store's
        thread runs: it prunes in turn with its writes)."""
        with self._cond:
            if self._thread is not None:
                self._jobs.append(float(now))
                self._cond.notify()
                return 0
        return self._prune_now(now)

    def _prune_now(self, now: float) -> int:
        return self._delete("stored_at < ?", (now - self.retention_seconds,))

    def get(self, trace_id: str) -> list[Span] | None:
        """The kept spans of one trace, or None (never kept, or dropped by retention)."""
        with self._read_lock:
            row = self._reader.execute(
                "SELECT body FROM trace_spans WHERE trace_id = ?", (trace_id,)
            ).fetchone()
        return None if row is None else decode_spans(row[0])


class SpanSink:
    """The span store as a sink of the judging core: the spans of every judged trace are
    kept (traces the store's queue cannot take are counted in
    `spanbudget_export_failures_total{sink="spans"}`: their pages lose the waterfall), and
    retention applied once a minute. Closing the sink closes the store."""

    name = "spans"

    def __init__(
        self,
        store: SpanStore,
        metrics: CollectorMetrics,
        *,
        prune_every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self._retention = Retention(store.prune, prune_every_s, clock)

    def consume(self, decisions: Decisions) -> None:
        judged = [
            [held.span for held in trace.spans]
            for trace in decisions.traces
            if trace.judged is not None
        ]
        dropped = self.store.keep(judged) if judged else 0
        revised = [[held.span for held in t.spans] for t in decisions.revised if t.judged]
        if revised:
            dropped += self.store.keep(revised, replace=True)
        if dropped:
            self.metrics.export_failures.labels(self.name).inc(dropped)
        self._retention.tick()

    def close(self) -> None:
        self.store.close()


class _Replacing(list):  # type: ignore[type-arg]
    """A job of traces that replace the ones kept before (revised verdicts)."""
