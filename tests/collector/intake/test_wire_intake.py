"""The intake reads protobuf bodies with the compiled wire reader where it was built: the
same batches as the protobuf package's messages give (spans, spans refused as too large,
what each trace lost), the same refusals with the same words, and a running collector
that judges through it."""

from __future__ import annotations

import gc
import gzip
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.core.held import HeldSpan
from spanbudget.collector.intake.otlp import Batch, IntakeError, decode_export
from spanbudget.collector.live.pipeline import assemble
from spanbudget.collector.live.settings import CollectorSettings
from spanbudget.collector.readers import request_from_json, spans_from_otlp
from spanbudget.collector.readers.span_records import (
    COMPILED,
    AttributeKeys,
    SpanReader,
    SpanRecords,
    untracked_each,
)
from spanbudget.collector.spans import Span

from tests.support.collector import BUDGET
from tests.support.otlp import to_request
from tests.support.traces import rag_trace

pytestmark = pytest.mark.skipif(not COMPILED, reason="the compiled reader (_wire) is not built")

PROTOBUF = "application/x-protobuf"
WIRE = SpanReader(AttributeKeys(every=True), compiled=True)
UPB = SpanReader(AttributeKeys(every=True), compiled=False)
DECODE_ERROR = "OTLP request: not a valid OTLP protobuf message"


def decode(body: bytes, reader: SpanReader, **limits: int) -> Batch | IntakeError:
    try:
        return decode_export(
            body,
            content_type=PROTOBUF,
            content_encoding="gzip" if body[:2] == b"\x1f\x8b" else None,
            max_body_bytes=limits.get("max_body_bytes", 4_000_000),
            max_span_bytes=limits.get("max_span_bytes", 64_000),
            originals=False,
            reader=reader,
        )
    except IntakeError as exc:
        return exc


def alike(body: bytes, **limits: int) -> Batch | IntakeError:
    """Decode `body` both ways, assert the results equal, return the wire reader's."""
    ours, theirs = decode(body, WIRE, **limits), decode(body, UPB, **limits)
    if isinstance(ours, IntakeError) or isinstance(theirs, IntakeError):
        assert isinstance(ours, IntakeError), (ours, theirs)
        assert isinstance(theirs, IntakeError), (ours, theirs)
        assert (ours.status, ours.reason) == (theirs.status, theirs.reason)
        if theirs.message.startswith(DECODE_ERROR):  # the wire reader names the byte
            assert ours.message.startswith(DECODE_ERROR), ours.message
        else:
            assert ours.message == theirs.message
        return ours
    assert [h.span for h in ours.spans] == [h.span for h in theirs.spans]
    assert (ours.rejected, ours.lost) == (theirs.rejected, theirs.lost)
    return ours


def reference_body(traces: int = 3) -> bytes:
    spans = []
    for i in range(traces):
        builder = rag_trace(trace_id=f"{i + 1:032x}", retrieval=10 * i)
        builder.add("stream.forward", 150, 300, parent=builder.spans[1].span_id)
        spans += builder.spans
    return to_request(spans).SerializeToString()


def test_reference_and_real_bodies_decode_alike(shared_fixtures: Path) -> None:
    batch = alike(reference_body())
    assert isinstance(batch, Batch)
    assert len(batch.spans) == 36
    assert not batch.rejected
    assert isinstance(alike(gzip.compress(reference_body())), Batch)
    for path in sorted((shared_fixtures / "otlp").glob("*.json")):
        document = json.loads(path.read_text())
        body = request_from_json(document, path.name).SerializeToString()
        assert isinstance(alike(body), Batch), path.name


def test_oversized_spans_are_refused_alike() -> None:
    request = ExportTraceServiceRequest.FromString(reference_body(2))
    spans = request.resource_spans[0].scope_spans[0].spans
    big = spans[0]
    big.attributes.add(key="blob").value.string_value = "x" * 5_000
    limit = 4_000
    assert big.ByteSize() > limit > max(s.ByteSize() for s in spans[1:])
    batch = alike(request.SerializeToString(), max_span_bytes=limit)
    assert isinstance(batch, Batch)
    assert batch.rejected == 1
    assert batch.lost == {big.trace_id.hex(): {"span_too_large": 1}}
    # Every span over the limit: a 400, in the same words.
    refused = alike(request.SerializeToString(), max_span_bytes=10)
    assert isinstance(refused, IntakeError)
    assert refused.reason == "span_too_large"


@pytest.mark.parametrize(
    "body",
    [
        b"\x0a\x05\x12\x03",  # cut short
        b"\xff\xff\xff",  # not protobuf
        ExportTraceServiceRequest().SerializeToString() + b"\x0a\x02\x12\x00",  # an empty scope
        to_request([]).SerializeToString() or b"\x0a\x00",  # no spans at all
    ],
)
def test_malformed_and_empty_bodies_get_the_same_answer(body: bytes) -> None:
    alike(body)


def test_bad_ids_are_refused_in_the_same_words() -> None:
    request = ExportTraceServiceRequest.FromString(reference_body(1))
    request.resource_spans[0].scope_spans[0].spans.append(
        ProtoSpan(trace_id=b"abc", span_id=bytes(8), name="bad")
    )
    refused = alike(request.SerializeToString())
    assert isinstance(refused, IntakeError)
    assert "traceId has 3 bytes" in refused.message


class CountingReader(SpanReader):
    """The compiled reader, counting the bodies it reads."""

    def __init__(self) -> None:
        super().__init__(AttributeKeys(every=True), compiled=True)
        self.reads = 0

    def read(self, data: bytes, source: str) -> SpanRecords:
        self.reads += 1
        return super().read(data, source)


def test_the_collector_reads_its_bodies_with_the_wire_reader(tmp_path: Path) -> None:
    """`spanbudget collect`, as assembled, takes the fast path: its intake's default reader
    is the compiled one, each protobuf body goes through the reader it is given, and what
    it queues is what the protobuf package's spans say."""
    settings = CollectorSettings.from_flat(
        grpc_listen="off", db_path=tmp_path / "v.db", budget_path=BUDGET
    )
    default = assemble(settings, load_budget(BUDGET).budget, alerts=False)
    assert default.intake.reader.compiled
    default.close()
    reader = CountingReader()
    pipeline = assemble(settings, load_budget(BUDGET).budget, alerts=False, reader=reader)
    pipeline.start()
    try:
        body = reference_body()
        batch = pipeline.intake.receive(body, content_type=PROTOBUF, content_encoding=None)
        assert reader.reads == 1
        expected = spans_from_otlp(ExportTraceServiceRequest.FromString(body))
        assert [h.span for h in batch.spans] == expected
        assert all(h.proto is None for h in batch.spans)  # nothing forwards: no originals
    finally:
        pipeline.close()


def test_the_spans_of_a_request_share_their_strings() -> None:
    """What makes a span held from the records smaller than one from the protobuf
    package's messages: one string object per distinct string of the request (a trace id,
    a parent id and a span id of the same text, names, services, attribute keys)."""
    spans = WIRE.read(reference_body(2), "test").to_spans()
    span_ids = {id(s.span_id) for s in spans}
    for trace_id in {s.trace_id for s in spans}:
        ids = {id(s.trace_id) for s in spans if s.trace_id == trace_id}
        assert len(ids) == 1, trace_id
    children = [s for s in spans if s.parent_span_id is not None]
    assert children
    for child in children:
        assert id(child.parent_span_id) in span_ids  # a span id's own string object
    keys = [key for s in spans for key in s.attributes if key == "gen_ai.operation.name"]
    assert len(keys) > 1
    assert len({id(key) for key in keys}) == 1


def test_the_intake_leaves_its_spans_to_reference_counting() -> None:
    """Neither the held spans nor their `Span`s, attributes and values are tracked by the
    cycle collector (none can be in a cycle), so its collections never traverse what the
    assembly holds; reference counting frees them."""
    batch = decode(reference_body(3), WIRE)
    assert isinstance(batch, Batch)
    assert batch.spans
    for held in batch.spans:
        assert not gc.is_tracked(held)
        assert not gc.is_tracked(held.span)
        assert not gc.is_tracked(held.span.attributes)
    # The held span's slot and the argument hold it, nothing else: freed with its batch.
    holders = sys.getrefcount(batch.spans[0].span)
    assert holders == 2


def test_each_span_is_held_as_heldspan_makes_it() -> None:
    """`untracked_each` makes in C what `HeldSpan(span)` makes, and refuses a class it
    could not make so (a field past the first that is not None by default)."""
    spans = WIRE.read(reference_body(1), "test").to_spans()
    held = untracked_each(HeldSpan, spans)
    assert held == [HeldSpan(span) for span in spans]
    assert [type(h) for h in held] == [HeldSpan] * len(spans)
    assert all(h.span is span for h, span in zip(held, spans, strict=True))

    @dataclass(slots=True)
    class Counted:
        span: Span
        count: int = 0

    with pytest.raises(TypeError, match="default to None"):
        untracked_each(Counted, spans)
