"""The compiled OTLP wire reader (`_wire.pyx`) against the protobuf package's own decoder.

Every message is read twice: by the compiled reader, and by the pure-Python twin, which
lets the protobuf package (upb) decode the bytes. They must accept and refuse the same
bytes and, where both accept, make equal records, column for column; with every
attribute kept, the records' spans must also be what `spans_from_otlp` makes today. The
messages: the real OTLP exports of the shared fixtures, random messages built with
hypothesis (repeated fields that protobuf merges, fields in any order, unknown fields and
known ones with the wrong wire type among them), the same bytes mutated (bits flipped,
cut short, bytes inserted, dropped or repeated), and the edge cases of the wire format
where upb's limits decide. Each test tallies messages, fields compared and mismatches,
and the module prints the totals.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    EntityRef,
    InstrumentationScope,
    KeyValue,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from spanbudget.collector.readers import TraceReadError, spans_from_otlp
from spanbudget.collector.readers._otlp import request_from_json
from spanbudget.collector.readers.span_records import (
    COMPILED,
    AttributeKeys,
    SpanReader,
    SpanRecords,
)

from tests.support.otlp import to_request
from tests.support.traces import rag_trace

compiled_only = pytest.mark.skipif(not COMPILED, reason="the compiled reader (_wire) is not built")

EVERY = AttributeKeys(every=True)
# What the evaluator reads of the reference traces, and keys the generated messages use.
SOME = AttributeKeys(
    names=frozenset({"gen_ai.operation.name", "gen_ai.response.time_to_first_chunk", "k"}),
    prefixes=("loadtest.", "db."),
)
DECODE_ERROR = "not a valid OTLP protobuf message"


@dataclass
class Counts:
    messages: int = 0
    accepted: int = 0
    fields: int = 0
    mismatches: int = 0

    def line(self, name: str) -> str:
        return (
            f"{name:<8} {self.messages:>6} messages ({self.accepted} accepted), "
            f"{self.fields} fields compared, {self.mismatches} mismatches"
        )


class Tally:
    """Counts by kind of message (real, random, mutated, edges, cuts)."""

    def __init__(self) -> None:
        self.kinds: dict[str, Counts] = {}
        self.kind = "real"

    def __call__(self, kind: str) -> Tally:
        self.kind = kind
        return self

    @property
    def now(self) -> Counts:
        return self.kinds.setdefault(self.kind, Counts())

    def lines(self) -> list[str]:
        total = Counts()
        for counts in self.kinds.values():
            total.messages += counts.messages
            total.accepted += counts.accepted
            total.fields += counts.fields
            total.mismatches += counts.mismatches
        found = [counts.line(kind) for kind, counts in self.kinds.items()]
        return [*found, total.line("total")]


@pytest.fixture(scope="module")
def tally(request: pytest.FixtureRequest) -> Iterator[Tally]:
    counts = Tally()
    yield counts
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("\nwire reader vs protobuf:")
            for line in counts.lines():
                reporter.write_line(f"  {line}")


# Comparing: records column for column, spans field for field, floats by their bits.


def _plain(value: Any) -> Any:
    """A value to compare with ==: floats as their bits (NaN equals itself)."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _compare_records(compiled: SpanRecords, pure: SpanRecords) -> tuple[int, list[str]]:
    """The number of entries compared and what differs."""
    compared, differ = 0, []
    for field in fields(SpanRecords):
        a, b = getattr(compiled, field.name), getattr(pure, field.name)
        if field.name in ("trace_ids", "span_ids", "parent_ids"):
            width = 16 if field.name == "trace_ids" else 8
            a = [a[i : i + width] for i in range(0, len(a), width)]
            b = [b[i : i + width] for i in range(0, len(b), width)]
        elif field.name == "data":
            a, b = [a], [b]
        a, b = _plain(list(a)), _plain(list(b))
        compared += max(len(a), len(b))
        if a != b:
            differ.append(f"{field.name}: {a!r} != {b!r}")
    return compared, differ


def _compare_spans(records: SpanRecords, data: bytes) -> tuple[int, list[str]]:
    """The records' spans, made by the compiled `spans` and by `SpanRecords.span`, each
    against `spans_from_otlp` (every attribute kept); types too (a `SpanEvent`, not a
    tuple; an int, not a bool), but for the attributes' mapping itself (the compiled
    `spans` makes a compact read-only one: tests/collector/readers/test_attributes.py)."""
    today = spans_from_otlp(ExportTraceServiceRequest.FromString(data))
    differ = []
    compared = 0
    for compiled in (True, False):
        ours = records.to_spans(compiled=compiled)
        for i, (a, b) in enumerate(zip(ours, today, strict=False)):
            for name in Span_FIELDS:
                compared += 1
                mine, theirs = getattr(a, name), getattr(b, name)
                if name == "attributes" and isinstance(mine, Mapping):
                    mine = dict(mine)  # the compiled reader's compact `Attributes`
                if _plain(mine) != _plain(theirs) or _types(mine) != _types(theirs):
                    differ.append(f"span {i} {name} ({compiled=}): {mine!r} != {theirs!r}")
        if len(ours) != len(today):
            differ.append(f"{len(ours)} spans != {len(today)} ({compiled=})")
    return compared, differ


def _types(value: Any) -> Any:
    """The types in `value`, nested as it is."""
    if isinstance(value, list | tuple):
        return (type(value), [_types(item) for item in value])
    if isinstance(value, dict):
        return (dict, {key: _types(item) for key, item in value.items()})
    return type(value)


Span_FIELDS = (
    "trace_id", "span_id", "name", "start_ns", "end_ns", "parent_span_id", "kind",
    "service", "attributes", "error", "events", "host", "scope",
)  # fmt: skip


def _read(reader: SpanReader, data: bytes) -> SpanRecords | TraceReadError:
    try:
        return reader.read(data, "fuzz")
    except TraceReadError as exc:
        return exc


def check(data: bytes, tally: Tally, keys: AttributeKeys = EVERY) -> bool:
    """Read `data` both ways and hold them equal; whether it was accepted."""
    compiled = _read(SpanReader(keys, compiled=True), data)
    pure = _read(SpanReader(keys, compiled=False), data)
    counts = tally.now
    counts.messages += 1
    differ: list[str] = []
    if isinstance(compiled, TraceReadError) or isinstance(pure, TraceReadError):
        counts.fields += 1
        if not (isinstance(compiled, TraceReadError) and isinstance(pure, TraceReadError)):
            differ.append(f"accept/refuse: compiled {compiled!r}, protobuf {pure!r}")
        elif compiled.message != pure.message and not (
            compiled.message.startswith(DECODE_ERROR) and pure.message.startswith(DECODE_ERROR)
        ):
            differ.append(f"errors: {compiled.message!r} != {pure.message!r}")
    else:
        counts.accepted += 1
        compared, differ = _compare_records(compiled, pure)
        counts.fields += compared
        if keys.every:
            compared, more = _compare_spans(compiled, data)
            counts.fields += compared
            differ += more
    counts.mismatches += len(differ)
    assert not differ, f"{data!r}: " + "; ".join(differ)
    return not isinstance(compiled, TraceReadError)


# The wire format by hand, for what protobuf's own serializer never writes.


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def ld(number: int, body: bytes) -> bytes:
    return tag(number, 2) + varint(len(body)) + body


# (i) The real OTLP exports.


def _fixture_requests(folder: Path) -> list[tuple[str, bytes]]:
    found = []
    paths = sorted((folder / "otlp").glob("*.json"))
    for path in [*paths, folder / "jaeger" / "jaeger_apiv3_GetTrace.json"]:
        document = json.loads(path.read_text())
        document = document.get("result", document)
        found.append((path.name, request_from_json(document, path.name).SerializeToString()))
    return found


def _reference_request() -> bytes:
    builder = rag_trace()
    builder.add("stream.forward", 150, 300, parent=builder.spans[1].span_id)
    return to_request(builder.spans).SerializeToString()


@compiled_only
def test_real_exports_read_alike(shared_fixtures: Path, tally: Tally) -> None:
    tally("real")
    requests = _fixture_requests(shared_fixtures)
    assert len(requests) == 4
    for name, data in requests:
        assert check(data, tally), name
        assert check(data, tally, SOME), name
    for _, data in requests:  # each span's bytes are its own message, as it came
        records = SpanReader(EVERY, compiled=True).read(data, "x")
        request = ExportTraceServiceRequest.FromString(data)
        originals = [s for r in request.resource_spans for ss in r.scope_spans for s in ss.spans]
        assert [Span.FromString(records.span_bytes(i)) for i in range(len(records))] == originals


@compiled_only
def test_reference_trace_reads_alike(tally: Tally) -> None:
    tally("real")
    data = _reference_request()
    assert check(data, tally)
    assert check(data, tally, SOME)
    records = SpanReader(SOME, compiled=True).read(data, "x")
    assert len(records) == 12
    kept = {records.strings[key] for key in records.attr_keys}
    assert kept <= {"gen_ai.operation.name", "gen_ai.response.time_to_first_chunk"} | {
        key for key in kept if key.startswith(("loadtest.", "db."))
    }
    spans = ExportTraceServiceRequest.FromString(data).resource_spans
    originals = [s for r in spans for ss in r.scope_spans for s in ss.spans]
    assert [Span.FromString(records.span_bytes(i)) for i in range(12)] == originals


# (ii) Random messages: each message a list of field occurrences, in any order, repeated
# fields among them (protobuf keeps the last scalar and merges messages), unknown fields
# and known numbers with another wire type.

_texts = st.text(max_size=12) | st.sampled_from(["", "a", "é", "日本", "\x00", "𝄞"])
_keys = st.sampled_from(
    ["service.name", "host.name", "host.id", "k", "loadtest.run", "db.system", "x", ""]
)
_int64 = st.integers(-(2**63), 2**63 - 1)
_uint64 = st.integers(0, 2**64 - 1)
_int32ish = st.integers(-3, 8) | st.integers(-(2**31), 2**31 - 1)


def _scalar_any() -> st.SearchStrategy[AnyValue]:
    return st.one_of(
        _texts.map(lambda v: AnyValue(string_value=v)),
        st.booleans().map(lambda v: AnyValue(bool_value=v)),
        _int64.map(lambda v: AnyValue(int_value=v)),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda v: AnyValue(double_value=v)),
        st.binary(max_size=6).map(lambda v: AnyValue(bytes_value=v)),
        st.just(AnyValue()),
        st.integers(0, 9).map(lambda v: AnyValue(string_value_strindex=v)),
    )


def _with_array(items: list[AnyValue]) -> AnyValue:
    value = AnyValue()
    value.array_value.values.extend(items)
    return value


def _with_kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
    value = AnyValue()
    value.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in pairs)
    return value


_any_values = st.recursive(
    _scalar_any(),
    lambda inner: (
        st.lists(inner, max_size=3).map(_with_array)
        | st.lists(st.tuples(_keys, inner), max_size=3).map(_with_kvlist)
    ),
    max_leaves=6,
)
# Scalars as protobuf's serializer never writes them: a bool of any varint (true when not
# 0), an int64 of any 64 bits, a double of any bits (NaNs with payloads among them).
_raw_scalar = st.one_of(
    _uint64.map(lambda v: tag(2, 0) + varint(v)),
    _uint64.map(lambda v: tag(3, 0) + varint(v)),
    st.binary(min_size=8, max_size=8).map(lambda b: tag(4, 1) + b),
)
# An AnyValue's bytes: usually one message, sometimes several joined (protobuf merges
# them: the last oneof field wins, two arrays in a row join).
_any_part = _any_values.map(lambda v: v.SerializeToString()) | _raw_scalar
_any_bytes = st.lists(_any_part, min_size=1, max_size=3).map(b"".join) | _any_part


@st.composite
def _key_value(draw: st.DrawFn, keys: st.SearchStrategy[str] = _keys) -> bytes:
    """A KeyValue's bytes: its key (sometimes twice, sometimes none) and 0 to 2 values."""
    parts = [ld(1, draw(keys).encode())]
    if draw(st.integers(0, 5)) == 0:
        parts.append(ld(1, draw(keys).encode()))
    if draw(st.integers(0, 8)) == 0:
        parts = []
    values = draw(st.integers(0, 2) | st.just(1))
    parts += [ld(2, draw(_any_bytes)) for _ in range(values)]
    if draw(st.integers(0, 8)) == 0:
        parts.append(tag(3, 0) + varint(draw(st.integers(0, 2**32))))  # key_strindex
    return b"".join(draw(st.permutations(parts)))


# Unknown fields, and known field numbers with a wire type protobuf does not expect.
_unknown = st.one_of(
    st.tuples(st.integers(1, 40) | st.just(2**29 - 1), st.integers(0, 2**64 - 1)).map(
        lambda f: tag(f[0], 0) + varint(f[1])
    ),
    st.tuples(st.integers(1, 40), st.binary(min_size=8, max_size=8)).map(
        lambda f: tag(f[0], 1) + f[1]
    ),
    # (a known number here would mostly be a bad id or a name that is not UTF-8)
    st.tuples(st.integers(17, 40), st.binary(max_size=6)).map(lambda f: ld(f[0], f[1])),
    st.tuples(st.integers(1, 40), st.binary(min_size=4, max_size=4)).map(
        lambda f: tag(f[0], 5) + f[1]
    ),
    st.tuples(st.integers(1, 40), st.integers(0, 99)).map(
        lambda f: tag(f[0], 3) + tag(f[1] + 1, 0) + b"\x01" + tag(f[0], 4)
    ),
)


def _mostly(valid: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`valid` nine times in ten: a request with one bad id is refused whole."""
    return st.integers(0, 9).flatmap(lambda n: other if n == 0 else valid)


_ids16 = st.binary(min_size=16, max_size=16)
_ids8 = st.binary(min_size=8, max_size=8)


def _field(message: Any) -> bytes:
    return message.SerializeToString()  # type: ignore[no-any-return]


def _event() -> st.SearchStrategy[bytes]:
    event = st.builds(
        lambda t, n, extra: (
            _field(Span(events=[Span.Event(time_unix_nano=t, name=n)]))
            + (ld(11, extra) if extra else b"")
        ),
        _uint64 | st.integers(0, 5),
        st.sampled_from(["first", "chunk", "", "é", "b"]) | _texts,
        st.just(b"") | _key_value().map(lambda kv: ld(3, kv)),
    )
    return event


_status = st.builds(
    # a code of 0 written out still counts (a status without one leaves the code as it was)
    lambda code, message: ld(
        15, (b"" if code is None else tag(3, 0) + varint(code % 2**64)) + ld(2, message.encode())
    ),
    st.sampled_from([2, 0, None]) | _int32ish,
    _texts,
)
_link = st.builds(
    lambda t, s, state, kv: (
        _field(Span(links=[Span.Link(trace_id=t, span_id=s, trace_state=state)]))
        + (ld(13, ld(4, kv)) if kv else b"")
    ),
    st.binary(max_size=16),
    st.binary(max_size=8),
    _texts,
    st.just(b"") | _key_value(),
)
_span_field = st.one_of(
    _key_value().map(lambda kv: ld(9, kv)),
    _key_value().map(lambda kv: ld(9, kv)),
    _event(),
    _status,
    _link,
    _texts.map(lambda v: _field(Span(name=v))),
    _int32ish.map(lambda v: tag(6, 0) + varint(v % 2**64)),
    _uint64.map(lambda v: _field(Span(start_time_unix_nano=v))),
    _uint64.map(lambda v: _field(Span(end_time_unix_nano=v))),
    _texts.map(lambda v: _field(Span(trace_state=v))),
    st.integers(0, 2**32 - 1).map(lambda v: _field(Span(flags=v))),
    st.integers(0, 9).map(lambda v: _field(Span(dropped_attributes_count=v))),
    _unknown,
)


@st.composite
def _span(draw: st.DrawFn) -> bytes:
    start = draw(_uint64 | st.integers(10**18, 10**18 + 10**9))
    end = draw(st.integers(0, 2**64 - 1) | st.just((start + 5) % 2**64))
    parts = [
        _field(Span(trace_id=draw(_mostly(_ids16, st.binary(max_size=17))))),
        _field(Span(span_id=draw(_mostly(_ids8, st.binary(max_size=9))))),
        _field(Span(parent_span_id=draw(_mostly(_ids8, st.sampled_from([b"", bytes(8), b"x"]))))),
        _field(Span(start_time_unix_nano=start)),
        _field(Span(end_time_unix_nano=end)),
        _field(Span(name=draw(_texts))),
    ]
    parts += draw(st.lists(_status, max_size=2))  # protobuf merges a repeated status
    parts += draw(st.lists(_span_field, max_size=8))
    return b"".join(draw(st.permutations(parts)))


# What the reader reads of a resource: the first service.name, the last host.name/host.id.
_resource_keys = st.sampled_from(["service.name", "host.name", "host.id", "k"])
_resource_field = st.one_of(
    # a Resource each: protobuf merges them into one list of attributes
    _key_value(_resource_keys).map(lambda kv: ld(1, ld(1, kv))),
    _key_value(_resource_keys).map(lambda kv: ld(1, ld(1, kv))),
    st.builds(
        lambda t, keys: ld(1, _field(Resource(entity_refs=[EntityRef(type=t, id_keys=keys)]))),
        _texts,
        st.lists(_texts, max_size=2),
    ),
    _texts.map(lambda v: _field(ResourceSpans(schema_url=v))),
    _unknown,
)
_scope_field = st.one_of(
    st.builds(
        lambda name, version: _field(
            ScopeSpans(scope=InstrumentationScope(name=name, version=version))
        ),
        _texts,
        _texts,
    ),
    _key_value().map(lambda kv: ld(1, ld(3, kv))),
    _texts.map(lambda v: _field(ScopeSpans(schema_url=v))),
    _unknown,
)


@st.composite
def _request(draw: st.DrawFn) -> bytes:
    resources = []
    for _ in range(draw(st.integers(0, 3))):
        scopes = []
        for _ in range(draw(st.integers(0, 2))):
            parts = [ld(2, span) for span in draw(st.lists(_span(), max_size=3))]
            parts += draw(st.lists(_scope_field, max_size=3))
            scopes.append(ld(2, b"".join(draw(st.permutations(parts)))))
        parts = scopes + draw(st.lists(_resource_field, max_size=4))
        resources.append(ld(1, b"".join(draw(st.permutations(parts)))))
    resources += draw(st.lists(_unknown, max_size=1))
    return b"".join(draw(st.permutations(resources)))


@compiled_only
@settings(
    max_examples=800,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(_request())
def test_random_messages_read_alike(tally: Tally, data: bytes) -> None:
    tally("random")
    check(data, tally)
    check(data, tally, SOME)


# (iii) Mutations of real and generated messages.


def _mutate(data: bytes, operations: list[tuple[int, int, int, bytes]]) -> bytes:
    out = bytearray(data)
    for kind, at, size, extra in operations:
        at = at % (len(out) + 1)
        if kind == 0 and out:  # flip a bit
            at %= len(out)
            out[at] ^= 1 << (size % 8)
        elif kind == 1:  # cut short
            del out[at:]
        elif kind == 2:  # insert bytes
            out[at:at] = extra
        elif kind == 3:  # drop bytes
            del out[at : at + size]
        else:  # repeat a stretch
            out[at:at] = out[at : at + size]
    return bytes(out)


_operations = st.lists(
    st.tuples(st.integers(0, 4), st.integers(0, 10**6), st.integers(0, 40), st.binary(max_size=4)),
    min_size=1,
    max_size=4,
)


def _rich_request() -> bytes:
    """Every kind of field the reader reads or checks, in an unusual order: the resource
    after its spans, a KeyValue with two values, an array, a key-value list, bytes, a
    link, a status, events, unknown fields and a field with the wrong wire type."""
    values = [
        AnyValue(string_value="chat"),
        AnyValue(int_value=-7),
        AnyValue(double_value=0.25),
        AnyValue(bool_value=True),
        _with_array([AnyValue(string_value="a"), AnyValue(int_value=1)]),
        _with_kvlist([("x", AnyValue(bytes_value=b"\x00\xff"))]),
    ]
    attributes = b"".join(
        ld(9, ld(1, f"k{i}".encode()) + ld(2, _field(v))) for i, v in enumerate(values)
    )
    attributes += ld(9, ld(1, b"k") + ld(2, _field(values[4])) + ld(2, _field(values[4])))
    span = (
        _ID_FIELDS
        + attributes
        + _field(Span(name="é span", kind=Span.SPAN_KIND_CLIENT, start_time_unix_nano=10**18))
        + _field(Span(end_time_unix_nano=10**18 + 5, parent_span_id=bytes(range(1, 9))))
        + _field(Span(events=[Span.Event(name="b", time_unix_nano=3), Span.Event(name="a")]))
        + _field(Span(links=[Span.Link(trace_id=bytes(16), trace_state="s")]))
        + _field(Span(status=Status(code=Status.STATUS_CODE_ERROR, message="no")))
        + tag(20, 3) + tag(1, 0) + b"\x01" + tag(20, 4)
        + tag(5, 0) + b"\x07"
    )  # fmt: skip
    resource = _field(
        ResourceSpans(
            resource=Resource(
                attributes=[
                    KeyValue(key="service.name", value=AnyValue(string_value="svc")),
                    KeyValue(key="host.id", value=AnyValue(int_value=4)),
                ]
            ),
            schema_url="u",
        )
    )
    scope = _field(ScopeSpans(scope=InstrumentationScope(name="lib", version="1")))
    return ld(1, ld(2, ld(2, span) + scope + ld(2, span)) + resource) + tag(30, 5) + b"abcd"


@pytest.fixture(scope="module")
def seeds(shared_fixtures: Path) -> list[bytes]:
    found = [data for _, data in _fixture_requests(shared_fixtures)]
    return [*found, _reference_request(), _rich_request(), _rich_request()]


@compiled_only
@settings(max_examples=2500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_messages_read_alike(tally: Tally, seeds: list[bytes], data: st.DataObject) -> None:
    tally("mutated")
    seed = data.draw(st.sampled_from(seeds))
    check(_mutate(seed, data.draw(_operations)), tally)


# (iv) Where upb's limits decide: the reader must draw each line where upb draws it.


def _nested_any(levels: int, tail: bytes) -> bytes:
    """A request whose resource attribute holds `levels` arrays within arrays."""
    body = tail
    for _ in range(levels):
        body = ld(5, ld(1, body))
    return ld(1, ld(1, ld(1, ld(1, b"k") + ld(2, body))))


def _groups(count: int, inner: bytes = b"") -> bytes:
    for _ in range(count):
        inner = tag(7, 3) + inner + tag(7, 4)
    return inner


def _in_span(body: bytes) -> bytes:
    return ld(1, ld(2, ld(2, body)))


_ID_FIELDS = _field(Span(trace_id=bytes(range(16)), span_id=bytes(range(8))))
_SERVICE_A, _SERVICE_B = (
    _field(Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value=name))]))
    for name in ("a", "b")
)

EDGES: dict[str, tuple[bytes, bool]] = {
    "empty request": (b"", True),
    "messages 101 deep": (_nested_any(48, ld(1, b"x")), True),
    "messages 102 deep": (_nested_any(48, ld(5, b"")), False),
    "100 groups at the top": (_groups(100), True),
    "101 groups at the top": (_groups(101), False),
    "99 groups in a ResourceSpans": (ld(1, _groups(99)), True),
    "100 groups in a ResourceSpans": (ld(1, _groups(100)), False),
    "field 0": (b"\x00\x01", False),
    "field 0 in a span": (_in_span(_ID_FIELDS + b"\x00\x01"), False),
    "field 0 inside a group": (tag(9, 3) + b"\x00\x01" + tag(9, 4), True),
    "group of field 0 inside a group": (tag(9, 3) + b"\x03\x04" + tag(9, 4), True),
    "largest field number": (varint((2**29 - 1) << 3) + b"\x01", True),
    "tag over 32 bits": (b"\x88\x80\x80\x80\x10\x01", False),
    "tag of 6 bytes": (b"\x88\x80\x80\x80\x80\x00\x01", False),
    "tag of 5 bytes": (b"\xa8\x80\x80\x80\x00\x01", True),
    "wire type 6": (tag(5, 6), False),
    "wire type 7": (tag(5, 7), False),
    "end-group at the top": (tag(5, 4), False),
    "end-group in a span": (_in_span(_ID_FIELDS + tag(15, 4)), False),
    "group ended by another number": (tag(5, 3) + tag(6, 4), False),
    "group never ended": (tag(5, 3) + tag(1, 0) + b"\x01", False),
    "varint of 10 bytes": (tag(5, 0) + b"\xff" * 9 + b"\x7f", True),
    "varint of 11 bytes": (tag(5, 0) + b"\xff" * 10 + b"\x01", False),
    "length of 5 bytes": (tag(1, 2) + b"\x80\x80\x80\x80\x00", True),
    "length of 6 bytes": (tag(1, 2) + b"\x80" * 5 + b"\x00", False),
    "length past the end": (tag(1, 2) + varint(2**31), False),
    "length past its message": (ld(1, tag(1, 2) + b"\x05\x00"), False),
    "fixed64 cut short": (_in_span(tag(7, 1) + b"\x00" * 7), False),
    "fixed32 cut short": (tag(5, 5) + b"\x00" * 3, False),
    "varint cut short": (tag(5, 0) + b"\x80", False),
    "name not UTF-8": (_in_span(_ID_FIELDS + ld(5, b"\xff")), False),
    "surrogate in trace_state": (_in_span(_ID_FIELDS + ld(3, b"\xed\xa0\x80")), False),
    "overlong UTF-8 in an event name": (_in_span(_ID_FIELDS + ld(11, ld(2, b"\xc0\x80"))), False),
    "past U+10FFFF in a link's trace_state": (
        _in_span(_ID_FIELDS + ld(13, ld(3, b"\xf4\x90\x80\x80"))),
        False,
    ),
    "bad UTF-8 in an unknown field": (_in_span(_ID_FIELDS + ld(99, b"\xff")), True),
    "bad UTF-8 in bytes_value": (_nested_any(0, ld(7, b"\xff")), True),
    "name as a varint": (_in_span(_ID_FIELDS + tag(5, 0) + b"\x03"), True),
    "resource_spans as a group": (tag(1, 3) + tag(9, 0) + b"\x01" + tag(1, 4), True),
    "status as a group": (
        _in_span(_ID_FIELDS + tag(15, 3) + tag(3, 0) + b"\x02" + tag(15, 4)),
        True,
    ),
    "kind beyond 32 bits": (_in_span(_ID_FIELDS + tag(6, 0) + varint(2**32 + 2)), True),
    "kind -1": (_in_span(_ID_FIELDS + tag(6, 0) + varint(2**64 - 1)), True),
    "status twice": (
        _in_span(_ID_FIELDS + ld(15, tag(3, 0) + b"\x02") + ld(15, ld(2, b"x"))),
        True,
    ),
    "status ERROR, then code 0": (
        _in_span(_ID_FIELDS + ld(15, tag(3, 0) + b"\x02") + ld(15, tag(3, 0) + b"\x00")),
        True,
    ),
    "a bool of 2": (_in_span(_ID_FIELDS + ld(9, ld(1, b"k") + ld(2, tag(2, 0) + b"\x02"))), True),
    "two resources, two service names": (
        ld(1, ld(1, _SERVICE_A) + ld(1, _SERVICE_B) + ld(2, ld(2, _ID_FIELDS))),
        True,
    ),
    "trace id missing": (_in_span(_field(Span(span_id=bytes(8)))), False),
    "parent id of 3 bytes": (_in_span(_ID_FIELDS + ld(4, b"abc")), False),
}


@compiled_only
@pytest.mark.parametrize(("data", "accepted"), EDGES.values(), ids=EDGES.keys())
def test_wire_format_edges(data: bytes, accepted: bool, tally: Tally) -> None:
    tally("edges")
    assert check(data, tally) is accepted


@compiled_only
def test_malformed_input_names_the_byte() -> None:
    reader = SpanReader(EVERY, compiled=True)
    with pytest.raises(TraceReadError, match=r"a truncated fixed64 \(at byte 7\)"):
        reader.read(_in_span(tag(7, 1) + b"\x00" * 7), "body")
    with pytest.raises(TraceReadError, match=r"^body: resourceSpans\[0\]\.scopeSpans\[0\]"):
        reader.read(_in_span(_field(Span(span_id=bytes(8)))), "body")


@compiled_only
def test_every_cut_of_a_request_is_read_or_refused_cleanly(tally: Tally) -> None:
    tally("cuts")
    data = _reference_request()
    for at in range(len(data) + 1):
        check(data[:at], tally, SOME)


def test_pure_records_say_what_spans_from_otlp_says(shared_fixtures: Path) -> None:
    """The twin on its own, as an install without a C compiler reads: the same spans as
    today, and each span's bytes where the records say they are."""
    reader = SpanReader(EVERY, compiled=False)
    requests = [data for _, data in _fixture_requests(shared_fixtures)]
    for data in [*requests, _reference_request(), _rich_request()]:
        records = reader.read(data, "pure")
        request = ExportTraceServiceRequest.FromString(data)
        assert _plain(records.to_spans()) == _plain(spans_from_otlp(request))
        originals = [s for r in request.resource_spans for ss in r.scope_spans for s in ss.spans]
        assert [Span.FromString(records.span_bytes(i)) for i in range(len(records))] == originals
    with pytest.raises(TraceReadError, match="traceId has 3 bytes, expected 16"):
        reader.read(_in_span(_field(Span(trace_id=b"abc", span_id=bytes(8)))), "pure")
