"""Decoded OTLP spans as compact records: columns of fixed-width numbers and one table of
strings per request, in place of a `Span` object per span (issue 46).

`SpanReader(keys).read(data, source)` turns the protobuf bytes of an
`ExportTraceServiceRequest` into `SpanRecords`. The compiled wire reader (`_wire.pyx`)
reads the bytes itself; where it was not built, or SPANBUDGET_PURE_PYTHON is set, the
protobuf package decodes them and this module reads the message: the same records either
way (tests/collector/readers/test_wire_reader.py holds the two equal, field for field, on
real, random and mutated messages). The records say what `spans_from_otlp` says of each
span (`SpanRecords.span(i)` is that `Span`), keeping of its attributes only those `keys`
names, and where in `data` each span's own encoding lies, for whatever keeps or forwards
spans as they came.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from ..spans import AttrValue, Span, SpanEvent, SpanKind, first_events
from ._errors import TraceReadError
from ._otlp import (
    SPAN_ID_BYTES,
    STATUS_CODE_ERROR,
    TRACE_ID_BYTES,
    _bad_ids,
    _host,
    _service_name,
    _value,
    request_from_protobuf,
)

try:  # the compiled reader (_wire.pyx, built by setup.py where a C compiler is)
    from . import _wire
except ImportError:
    _wire = None  # type: ignore[assignment]

__all__ = [
    "COMPILED",
    "AttributeKeys",
    "SpanReader",
    "SpanRecords",
    "ValueType",
    "compiled_span_rows",
    "untracked_each",
]

S = TypeVar("S")
T = TypeVar("T")

COMPILED = _wire is not None  # whether this install has the compiled reader
PURE_PYTHON_ENV = "SPANBUDGET_PURE_PYTHON"  # as the evaluator reads it


class ValueType:
    """What `SpanRecords.attr_values` holds for each type in `attr_types`."""

    STR = 0  # the string's number in `strings`
    BOOL = 1  # 0 or 1
    INT = 2  # the int64
    DOUBLE = 3  # the double's bits, as an int64
    LIST = 4  # the list's number in `lists` (an OTLP array, as `spans_from_otlp` reads it)


_KINDS = tuple(SpanKind.from_otlp(number) for number in range(6))
_NO_PARENT = bytes(SPAN_ID_BYTES)
_DOUBLE = struct.Struct("<d")
_INT64 = struct.Struct("<q")


@dataclass(frozen=True, slots=True)
class AttributeKeys:
    """Which span attributes the records keep: those named in `names` or starting with
    one of `prefixes`, or every one with `every` (what the evaluator's budget, marks and
    request rules read is a few keys; everything else stays in the span's bytes)."""

    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    every: bool = False

    def wants(self, key: str) -> bool:
        return self.every or key in self.names or key.startswith(self.prefixes)


@dataclass(frozen=True, slots=True)
class SpanRecords:
    """The spans of one request, column by column: span i is row i of each per-span
    column; its attributes are rows attr_bounds[i]:attr_bounds[i + 1] of the attribute
    columns, its events (each name once, at its earliest, by time: `first_events`) rows
    event_bounds[i]:event_bounds[i + 1] of the event columns; it came in ScopeSpans
    number batches[i], whose service, host and scope are the batch columns' rows.

    Strings (names, service, host, scope, attribute keys and string values) are numbers
    into `strings`, which holds each once, numbered by first use in that column order.
    Ids are fixed-width bytes (a parent of zeros: none); times are ns since the epoch
    (`end_ns` never before `start_ns`); kinds are OTLP's numbers, 1 to 5 (0 and unknown
    ones read as 1, internal). `data[span_at[i]:span_at[i] + span_len[i]]` is span i's
    own encoding (an OTLP `Span` message), and likewise the batch's ResourceSpans and
    ScopeSpans messages: what a span store, a journal or forwarding keeps.
    """

    data: bytes
    strings: tuple[str, ...]
    trace_ids: bytes  # 16 bytes a span
    span_ids: bytes  # 8 bytes a span
    parent_ids: bytes  # 8 bytes a span
    start_ns: array[int]  # Q
    end_ns: array[int]  # Q
    names: array[int]  # I
    kinds: array[int]  # B
    errors: array[int]  # B: 1 when the status code is ERROR
    batches: array[int]  # I
    span_at: array[int]  # I
    span_len: array[int]  # I
    attr_bounds: array[int]  # I, one more than spans
    attr_keys: array[int]  # I
    attr_types: array[int]  # B: ValueType
    attr_values: array[int]  # q
    lists: tuple[list[Any], ...]
    event_bounds: array[int]  # I, one more than spans
    event_names: array[int]  # I
    event_times: array[int]  # Q
    batch_services: array[int]  # I
    batch_hosts: array[int]  # i, -1: none
    batch_scopes: array[int]  # i, -1: none
    batch_resource_at: array[int]  # I
    batch_resource_len: array[int]  # I
    batch_scope_at: array[int]  # I
    batch_scope_len: array[int]  # I

    def __len__(self) -> int:
        return len(self.names)

    def trace_id(self, i: int) -> str:
        return self.trace_ids[TRACE_ID_BYTES * i : TRACE_ID_BYTES * (i + 1)].hex()

    def span_id(self, i: int) -> str:
        return self.span_ids[SPAN_ID_BYTES * i : SPAN_ID_BYTES * (i + 1)].hex()

    def parent_span_id(self, i: int) -> str | None:
        parent = self.parent_ids[SPAN_ID_BYTES * i : SPAN_ID_BYTES * (i + 1)]
        return None if parent == _NO_PARENT else parent.hex()

    def attribute_value(self, row: int) -> AttrValue:
        """The value of attribute row `row`, as `spans_from_otlp` gives it."""
        kind, payload = self.attr_types[row], self.attr_values[row]
        if kind == ValueType.STR:
            return self.strings[payload]
        if kind == ValueType.BOOL:
            return payload != 0
        if kind == ValueType.INT:
            return payload
        if kind == ValueType.DOUBLE:
            return float(_DOUBLE.unpack(_INT64.pack(payload))[0])
        return self.lists[payload]

    def attributes(self, i: int) -> dict[str, AttrValue]:
        strings, keys = self.strings, self.attr_keys
        return {
            strings[keys[row]]: self.attribute_value(row)
            for row in range(self.attr_bounds[i], self.attr_bounds[i + 1])
        }

    def span(self, i: int) -> Span:
        """Span i as a `Span` (the compiled `_wire.spans` makes them all faster)."""
        strings, batch = self.strings, self.batches[i]
        host, scope = self.batch_hosts[batch], self.batch_scopes[batch]
        return Span(
            self.trace_id(i),
            self.span_id(i),
            strings[self.names[i]],
            self.start_ns[i],
            self.end_ns[i],
            self.parent_span_id(i),
            _KINDS[self.kinds[i]],
            strings[self.batch_services[batch]],
            self.attributes(i),
            self.errors[i] == 1,
            tuple(
                SpanEvent(strings[self.event_names[row]], self.event_times[row])
                for row in range(self.event_bounds[i], self.event_bounds[i + 1])
            ),
            None if host < 0 else strings[host],
            None if scope < 0 else strings[scope],
        )

    def to_spans(self, *, compiled: bool | None = None) -> list[Span]:
        """Every span as a `Span` (`spans_within`, leaving none out)."""
        return self.spans_within(None, compiled=compiled)[0]

    def spans_within(
        self, max_span_bytes: int | None, *, compiled: bool | None = None
    ) -> tuple[list[Span], dict[str, int]]:
        """The spans as `Span`s, but those whose own encoding is over `max_span_bytes`,
        and how many each trace lost so (by hex trace id). `compiled` as `SpanReader`
        takes it: the compiled reader makes them straight from the columns."""
        if _use_compiled(compiled):
            return _wire.spans(self, -1 if max_span_bytes is None else max_span_bytes)
        spans: list[Span] = []
        lost: dict[str, int] = {}
        for i in range(len(self)):
            if max_span_bytes is not None and self.span_len[i] > max_span_bytes:
                trace_id = self.trace_id(i)
                lost[trace_id] = lost.get(trace_id, 0) + 1
            else:
                spans.append(self.span(i))
        return spans, lost

    def span_bytes(self, i: int) -> bytes:
        """Span i's own encoding, as it came: an OTLP `Span` message."""
        return self.data[self.span_at[i] : self.span_at[i] + self.span_len[i]]


class SpanReader:
    """Reads requests into `SpanRecords`, keeping the attributes `keys` names.

    `compiled`: None takes the compiled reader where it was built, unless
    SPANBUDGET_PURE_PYTHON is set (to anything but "" or "0"); False takes the
    pure-Python one; True requires the compiled one.
    """

    def __init__(self, keys: AttributeKeys, *, compiled: bool | None = None) -> None:
        self.keys = keys
        self.compiled = _use_compiled(compiled)
        self._seed = int.from_bytes(os.urandom(8), "little")  # the compiled reader's hash key

    def read(self, data: bytes, source: str) -> SpanRecords:
        """The records of `data`; `TraceReadError` (naming `source`) for bytes that are
        not an OTLP protobuf request and for spans whose ids are missing or of the wrong
        length (as `request_from_protobuf` and `spans_from_otlp` raise it)."""
        if self.compiled:
            return SpanRecords(*_wire.read(data, source, self.keys, self._seed))
        return records_from_protobuf(data, source, self.keys)


def compiled_span_rows() -> Callable[[list[Span]], list[list[Any]] | None] | None:
    """The span store's rows of a trace made in C (`_wire.span_rows`, held equal to
    `span_store`'s own), or None without the compiled reader (or with
    SPANBUDGET_PURE_PYTHON set)."""
    return _wire.span_rows if _use_compiled(None) else None


def untracked_each(cls: Callable[[S], T], items: list[S]) -> list[T]:
    """`[cls(item) for item in items]`, out of the cycle collector's sight where the
    compiled reader is built (its `Span`s are already), and made there in C: for a slotted
    dataclass whose first field takes the item and whose others default to None, whose
    objects can never be in a reference cycle (the intake's `HeldSpan` of each span, a
    span and its protobuf original), which reference counting alone frees. The assembly
    holds hundreds of thousands of them, which each collection of the young generation
    would otherwise traverse."""
    made: list[T] = [cls(item) for item in items] if _wire is None else _wire.wrap_each(cls, items)
    return made


def _use_compiled(compiled: bool | None) -> bool:
    """`compiled` as `SpanReader` takes it, decided."""
    if compiled and _wire is None:
        raise RuntimeError("the compiled OTLP reader (_wire) is not built in this install")
    if compiled is None:
        return _wire is not None and os.environ.get(PURE_PYTHON_ENV, "") in ("", "0")
    return compiled


def records_from_protobuf(data: bytes, source: str, keys: AttributeKeys) -> SpanRecords:
    """The pure-Python twin of `_wire.read`: the protobuf package decodes `data`, and
    a walk of its three outer levels finds where each message lies in it."""
    request = request_from_protobuf(data, source)
    layout = _layout(data, source)
    columns = _Columns()
    wants: dict[str, bool] = {}
    for i, resource_spans in enumerate(request.resource_spans):
        resource_at, resource_len, scopes = layout[i]
        attributes = resource_spans.resource.attributes
        service, host = _service_name(attributes), _host(attributes)
        for j, scope_spans in enumerate(resource_spans.scope_spans):
            scope_at, scope_len, positions = scopes[j]
            batch = len(columns.batches)
            columns.batches.append(
                (
                    service,
                    host,
                    scope_spans.scope.name or None,
                    resource_at,
                    resource_len,
                    scope_at,
                    scope_len,
                )
            )
            for k, span in enumerate(scope_spans.spans):
                columns.add_span(request, source, span, batch, positions[k], keys, wants)
    return columns.records(data)


class _Columns:
    """The twin's records under construction, strings as `str` until `records`."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, str | None, str | None, int, int, int, int]] = []
        self.ids: list[tuple[bytes, bytes, bytes]] = []
        self.numbers: list[tuple[int, int, int, int, int, int, int]] = []
        self.names: list[str] = []
        self.attributes: list[dict[str, AttrValue]] = []
        self.events: list[tuple[SpanEvent, ...]] = []

    def add_span(
        self,
        request: ExportTraceServiceRequest,
        source: str,
        span: Any,
        batch: int,
        position: tuple[int, int],
        keys: AttributeKeys,
        wants: dict[str, bool],
    ) -> None:
        trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
        if (
            len(trace_id) != TRACE_ID_BYTES
            or len(span_id) != SPAN_ID_BYTES
            or (parent and len(parent) != SPAN_ID_BYTES)
        ):
            raise _bad_ids(request, source)
        start, end, kind = span.start_time_unix_nano, span.end_time_unix_nano, span.kind
        self.ids.append((trace_id, span_id, parent or _NO_PARENT))
        self.numbers.append(
            (
                start,
                end if end > start else start,
                kind if 1 <= kind <= 5 else 1,
                int(span.status.code == STATUS_CODE_ERROR),
                batch,
                *position,
            )
        )
        self.names.append(span.name)
        kept: dict[str, AttrValue] = {}
        for kv in span.attributes:
            key = kv.key
            wanted = wants.get(key)
            if wanted is None:
                wanted = wants[key] = keys.wants(key)
            if wanted:
                kept[key] = _value(kv.value)
        self.attributes.append(kept)
        events = span.events
        self.events.append(
            first_events((e.name, e.time_unix_nano) for e in events) if events else ()
        )

    def records(self, data: bytes) -> SpanRecords:
        """The records, strings numbered by first use in `SpanRecords`' column order."""
        table: dict[str, int] = {}

        def number(text: str) -> int:
            return table.setdefault(text, len(table))

        services, hosts, scopes = array("I"), array("i"), array("i")
        for service, host, scope, *_ in self.batches:
            services.append(number(service))
            hosts.append(-1 if host is None else number(host))
            scopes.append(-1 if scope is None else number(scope))
        names = array("I", [number(name) for name in self.names])
        attr_bounds, attr_keys, attr_types, attr_values = array("I", [0]), array("I"), [], []
        lists: list[list[Any]] = []
        for kept in self.attributes:
            for key, value in kept.items():
                attr_keys.append(number(key))
                kind, payload = _typed(value, number, lists)
                attr_types.append(kind)
                attr_values.append(payload)
            attr_bounds.append(len(attr_keys))
        event_bounds, event_names, event_times = array("I", [0]), array("I"), array("Q")
        for events in self.events:
            for event in events:
                event_names.append(number(event.name))
                event_times.append(event.time_ns)
            event_bounds.append(len(event_names))
        numbers = list(zip(*self.numbers, strict=True)) or [()] * 7
        batches = list(zip(*self.batches, strict=True)) or [()] * 7
        return SpanRecords(
            data=data,
            strings=tuple(table),
            trace_ids=b"".join(ids[0] for ids in self.ids),
            span_ids=b"".join(ids[1] for ids in self.ids),
            parent_ids=b"".join(ids[2] for ids in self.ids),
            start_ns=array("Q", numbers[0]),
            end_ns=array("Q", numbers[1]),
            names=names,
            kinds=array("B", numbers[2]),
            errors=array("B", numbers[3]),
            batches=array("I", numbers[4]),
            span_at=array("I", numbers[5]),
            span_len=array("I", numbers[6]),
            attr_bounds=attr_bounds,
            attr_keys=attr_keys,
            attr_types=array("B", attr_types),
            attr_values=array("q", attr_values),
            lists=tuple(lists),
            event_bounds=event_bounds,
            event_names=event_names,
            event_times=event_times,
            batch_services=services,
            batch_hosts=hosts,
            batch_scopes=scopes,
            batch_resource_at=array("I", batches[3]),
            batch_resource_len=array("I", batches[4]),
            batch_scope_at=array("I", batches[5]),
            batch_scope_len=array("I", batches[6]),
        )


def _typed(value: AttrValue, number: Any, lists: list[list[Any]]) -> tuple[int, int]:
    """A value as its `ValueType` and its 64 bits."""
    if isinstance(value, str):
        return ValueType.STR, number(value)
    if isinstance(value, bool):
        return ValueType.BOOL, int(value)
    if isinstance(value, int):
        return ValueType.INT, value
    if isinstance(value, float):
        return ValueType.DOUBLE, _INT64.unpack(_DOUBLE.pack(value))[0]
    lists.append(list(value))
    return ValueType.LIST, len(lists) - 1


# Where each message lies: the twin's walk of the bytes the protobuf package accepted.

_Layout = list[tuple[int, int, list[tuple[int, int, list[tuple[int, int]]]]]]


def _layout(data: bytes, source: str) -> _Layout:
    """Each ResourceSpans' body (offset, length) with its ScopeSpans' and theirs with
    their Spans', in order, as the protobuf package numbers them."""
    return [
        (at, size, [(s_at, s_size, list(_bodies(data, s_at, s_size, 2, source)))
                    for s_at, s_size in _bodies(data, at, size, 2, source)])
        for at, size in _bodies(data, 0, len(data), 1, source)
    ]  # fmt: skip


def _bodies(data: bytes, at: int, size: int, number: int, source: str) -> Iterator[tuple[int, int]]:
    """The bodies of the length-delimited fields `number` in data[at:at + size]."""
    end = at + size
    while at < end:
        tag, at = _varint(data, at, source)
        wire = tag & 7
        if wire == 2:
            length, at = _varint(data, at, source)
            if tag >> 3 == number:
                yield at, length
            at += length
        else:
            at = _skip(data, at, tag, source)


def _skip(data: bytes, at: int, tag: int, source: str) -> int:
    wire = tag & 7
    if wire == 0:
        return _varint(data, at, source)[1]
    if wire == 1:
        return at + 8
    if wire == 5:
        return at + 4
    if wire == 3:
        while True:
            inner, at = _varint(data, at, source)
            if inner == (tag & ~7) | 4:
                return at
            if inner & 7 == 2:
                length, at = _varint(data, at, source)
                at += length
            else:
                at = _skip(data, at, inner, source)
    raise TraceReadError(source, "not a valid OTLP protobuf message")  # protobuf took it


def _varint(data: bytes, at: int, source: str) -> tuple[int, int]:
    value = shift = 0
    while at < len(data):
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise TraceReadError(source, "not a valid OTLP protobuf message")  # protobuf took it
