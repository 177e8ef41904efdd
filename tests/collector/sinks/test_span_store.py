"""The span store behind the trace page: spans come back as they went in, across a restart,
and the store stays within its count, byte and age bounds, dropping the oldest first."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from spanbudget.collector.readers.span_records import AttributeKeys, SpanReader, compiled_span_rows
from spanbudget.collector.sinks.span_store import (
    SpanStore,
    decode_spans,
    encode_spans,
    span_rows,
)
from spanbudget.collector.spans import Span

from tests.support.collector import running_collector
from tests.support.judging import marked_trees
from tests.support.otlp import to_request
from tests.support.traces import rag_trace


def _trace(i: int) -> list[Span]:
    return rag_trace(trace_id=f"{i:032x}", retrieval=i % 7).spans


def _store(path: Path, **bounds: float) -> SpanStore:
    values = {"retention_seconds": 3600.0, "max_traces": 1000, "max_bytes": 10**8, **bounds}
    return SpanStore(path, **values)  # type: ignore[arg-type]


def test_spans_round_trip_with_every_field(tmp_path: Path) -> None:
    spans = rag_trace(chat_error=True).spans
    spans[0] = Span(
        **{
            **{f: getattr(spans[0], f) for f in Span.__dataclass_fields__},
            "attributes": {**spans[0].attributes, "tags": ("a", "b"), "flag": True, "n": 3},
        }
    )
    assert decode_spans(encode_spans(spans)) == spans
    store = _store(tmp_path / "s.db")
    store.write([spans])
    store.close()
    again = _store(tmp_path / "s.db")  # a restart keeps them
    assert again.get(spans[0].trace_id) == spans
    assert again.get("0" * 32) is None
    assert again.count == 1
    assert again.stored_bytes == len(encode_spans(spans))


def test_a_store_written_by_the_release_before_is_still_read(tmp_path: Path) -> None:
    """Rows of the zlib format (3, the release before LZ4) come back as they went in, beside
    new rows in the same file."""
    old, new = _trace(1), _trace(2)
    rows = [
        [s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns, s.kind.value, s.service,
         dict(s.attributes), s.error, s.host, [list(e) for e in s.events], s.scope]
        for s in old
    ]  # fmt: skip
    body = zlib.compress(json.dumps([3, old[0].trace_id, rows]).encode(), 1)
    assert decode_spans(body) == old
    store = _store(tmp_path / "s.db")
    store.write([new])
    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute(
            "INSERT INTO trace_spans (trace_id, stored_at, bytes, body) VALUES (?,?,?,?)",
            (old[0].trace_id, time.time(), len(body), body),
        )
    assert (store.get(old[0].trace_id), store.get(new[0].trace_id)) == (old, new)


def test_count_bound_drops_the_oldest(tmp_path: Path) -> None:
    store = _store(tmp_path / "s.db", max_traces=5)
    for i in range(1, 13):
        store.write([_trace(i)])
        assert store.count <= 5
    assert [i for i in range(1, 13) if store.get(f"{i:032x}")] == [8, 9, 10, 11, 12]
    store.write([_trace(12)])  # kept already: stays once
    assert store.count == 5


def test_byte_bound_drops_the_oldest(tmp_path: Path) -> None:
    size = len(encode_spans(_trace(1)))
    store = _store(tmp_path / "s.db", max_bytes=size * 3 + size // 2)
    store.write([_trace(i) for i in range(1, 11)])
    assert store.stored_bytes <= size * 3 + size // 2
    kept = [i for i in range(1, 11) if store.get(f"{i:032x}")]
    assert kept == list(range(11 - len(kept), 11))  # the newest, contiguous
    assert len(kept) == 3


def test_age_bound(tmp_path: Path) -> None:
    store = _store(tmp_path / "s.db", retention_seconds=60)
    now = time.time()
    store.write([_trace(1)], now=now - 120)
    store.write([_trace(2)], now=now)
    assert store.prune(now) == 1
    assert store.get(f"{1:032x}") is None
    assert store.get(f"{2:032x}") is not None
    assert (store.count, store.stored_bytes) == (1, len(encode_spans(_trace(2))))


@pytest.mark.parametrize("keep", [True, False])
def test_the_collector_keeps_the_spans_of_judged_traces(tmp_path: Path, keep: bool) -> None:
    spans = rag_trace(trace_id="ab" * 16).spans
    overrides = {} if keep else {"span_retention_count": 0}
    with running_collector(tmp_path, **overrides) as collector:
        response = collector.post(to_request(spans).SerializeToString(), "application/x-protobuf")
        assert response.status_code == 200
        collector.verdict("ab" * 16)
        kept = collector.pipeline.spans
        if not keep:
            assert kept is None
            return
        assert kept is not None
        assert kept.wait_idle(10)  # its own thread writes them, off the worker
        got = kept.get("ab" * 16)
        assert got is not None
        assert sorted(s.span_id for s in got) == sorted(s.span_id for s in spans)
        assert {s.name for s in got} == {s.name for s in spans}


def test_keep_writes_on_the_store_s_thread_and_drops_beyond_its_queue(tmp_path: Path) -> None:
    store = _store(tmp_path / "s.db")
    store.max_pending = 3
    assert store.keep([_trace(i) for i in range(1, 6)]) == 2  # room for three
    assert store.wait_idle(10)
    assert store.dropped == 2
    assert [i for i in range(1, 6) if store.get(f"{i:032x}")] == [1, 2, 3]
    assert store.keep([_trace(6)]) == 0  # written, the queue has room again
    store.prune(time.time() + 7200)  # queued behind the write, on the same thread
    store.close()  # drains and stops the thread
    assert _store(tmp_path / "s.db").count == 0


@pytest.mark.skipif(compiled_span_rows() is None, reason="the compiled reader is not built")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(marked_trees())
def test_the_compiled_rows_are_the_pythons(spans: list[Span]) -> None:
    """The rows `encode_spans` writes, made in C, are the Python's: values and their types,
    for spans as given (dict attributes) and as the wire reader makes them."""
    body = to_request(spans).SerializeToString()
    read = SpanReader(AttributeKeys(every=True), compiled=True).read(body, "test").to_spans()
    for trace in (spans, read):
        got, expected = span_rows(trace), span_rows(trace, compiled=False)
        assert got == expected
        assert [[type(v) for v in row] for row in got] == [
            [type(v) for v in row] for row in expected
        ]
        assert [list(row[7]) for row in got] == [list(row[7]) for row in expected]  # key order
        assert decode_spans(encode_spans(trace)) == trace


def test_the_rows_of_spans_of_a_subclass_are_read_as_the_python_reads_them() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Traced(Span):
        extra: int = 0

    spans = [
        Traced(**{f: getattr(s, f) for f in Span.__dataclass_fields__}) for s in rag_trace().spans
    ]
    assert span_rows(spans) == span_rows(spans, compiled=False)
    assert decode_spans(encode_spans(spans)) == rag_trace().spans
