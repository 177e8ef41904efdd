"""OTLP traces (protobuf or OTLP/JSON) decoded with opentelemetry-proto and turned into spans.

`spans_from_otlp` is also the live collector's hot path, so it reads each field once.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from spanbudget.common.semconv import HOST_ID, HOST_NAME, SERVICE_NAME

from ..spans import AttrValue, Span, SpanKind, first_events
from ._errors import TraceReadError

__all__ = [
    "request_from_json",
    "request_from_protobuf",
    "spans_from_otlp",
]

UNKNOWN_SERVICE = "unknown_service"
# opentelemetry.proto.trace.v1.Status.StatusCode.STATUS_CODE_ERROR
STATUS_CODE_ERROR = 2
TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8

_KINDS = tuple(SpanKind.from_otlp(number) for number in range(6))
# An all-zero span id is OTel's "invalid span id": some exporters write it for "no parent".
_NO_PARENT = (b"", bytes(SPAN_ID_BYTES))
_SCALAR_FIELDS = frozenset({"bool_value", "int_value", "double_value"})
_ID_FIELDS = (
    ("traceId", TRACE_ID_BYTES),
    ("spanId", SPAN_ID_BYTES),
    ("parentSpanId", SPAN_ID_BYTES),
)


def spans_from_otlp(
    request: ExportTraceServiceRequest, *, source: str = "OTLP request"
) -> list[Span]:
    """Convert a decoded `ExportTraceServiceRequest`; links and event attributes are not read.

    Raises `TraceReadError` (naming `source` and the span) when a span's ids are missing
    or of the wrong length.
    """
    spans: list[Span] = []
    append = spans.append
    kinds = _KINDS
    n_kinds = len(kinds)
    internal = SpanKind.INTERNAL
    no_parent = _NO_PARENT
    value_of = _value
    for resource_spans in request.resource_spans:
        resource = resource_spans.resource.attributes
        service = _service_name(resource)
        host = _host(resource)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name or None
            for span in scope_spans.spans:
                trace_id = span.trace_id
                span_id = span.span_id
                parent = span.parent_span_id
                if (
                    len(trace_id) != TRACE_ID_BYTES
                    or len(span_id) != SPAN_ID_BYTES
                    or (parent and len(parent) != SPAN_ID_BYTES)
                ):
                    raise _bad_ids(request, source)
                start = span.start_time_unix_nano
                end = span.end_time_unix_nano
                kind = span.kind
                attributes: dict[str, AttrValue] = {}
                for kv in span.attributes:
                    value = kv.value
                    text = value.string_value
                    # most attributes are strings: one field read instead of WhichOneof
                    attributes[kv.key] = text if text else value_of(value)
                events = span.events
                append(
                    Span(
                        trace_id.hex(),
                        span_id.hex(),
                        span.name,
                        start,
                        end if end > start else start,
                        None if parent in no_parent else parent.hex(),
                        kinds[kind] if 0 <= kind < n_kinds else internal,
                        service,
                        attributes,
                        span.status.code == STATUS_CODE_ERROR,
                        first_events((e.name, e.time_unix_nano) for e in events) if events else (),
                        host,
                        scope,
                    )
                )
    return spans


def request_from_protobuf(data: bytes, source: str) -> ExportTraceServiceRequest:
    """Decode a binary `ExportTraceServiceRequest`."""
    try:
        request: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(data)
    except DecodeError as exc:
        raise TraceReadError(source, f"not a valid OTLP protobuf message: {exc}") from None
    return request


def request_from_json(document: dict[str, Any], source: str) -> ExportTraceServiceRequest:
    """Decode one OTLP/JSON `ExportTraceServiceRequest` (or API v3 `result`), already parsed.

    OTLP/JSON writes ids as hex where proto-JSON expects base64, so ids are rewritten in
    place first; everything else (int64 as strings or numbers, enum names or numbers,
    unknown fields) is left to protobuf's own JSON parser.
    """
    _hex_ids_to_base64(document, source)
    try:
        request: ExportTraceServiceRequest = json_format.ParseDict(
            document, ExportTraceServiceRequest(), ignore_unknown_fields=True
        )
    except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
        reason = str(exc).rstrip(".")
        raise TraceReadError(source, f"not a valid OTLP trace request: {reason}") from None
    return request


def _service_name(attributes: Any) -> str:
    for kv in attributes:
        if kv.key == SERVICE_NAME:
            value = _value(kv.value)
            return value if isinstance(value, str) else str(value)
    return UNKNOWN_SERVICE


def _host(attributes: Any) -> str | None:
    """The resource's host.name, else its host.id, else None (DESIGN §5 rule 3)."""
    found: dict[str, str] = {}
    for kv in attributes:
        if kv.key in (HOST_NAME, HOST_ID):
            value = _value(kv.value)
            if value != "":
                found[kv.key] = value if isinstance(value, str) else str(value)
    return found.get(HOST_NAME) or found.get(HOST_ID)


def _value(value: Any) -> AttrValue:
    """An OTLP `AnyValue` as a scalar or a list of scalars; anything else as a string."""
    text = value.string_value
    if text:  # most attributes are strings: one field read instead of WhichOneof
        return text  # type: ignore[no-any-return]
    which = value.WhichOneof("value")
    if which in _SCALAR_FIELDS or which == "string_value":
        return getattr(value, which)  # type: ignore[no-any-return]
    if which == "array_value":
        return [_scalar(item) for item in value.array_value.values]
    return _render(value)


def _scalar(value: Any) -> str | bool | int | float:
    which = value.WhichOneof("value")
    if which == "string_value" or which in _SCALAR_FIELDS:
        return getattr(value, which)  # type: ignore[no-any-return]
    return _render(value)


def _render(value: Any) -> str:
    """kvlist, nested array, bytes or empty `AnyValue` as text: JSON, base64, or ""."""
    plain = _plain(value)
    if plain is None:
        return ""
    return plain if isinstance(plain, str) else json.dumps(plain, separators=(",", ":"))


def _plain(value: Any) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_plain(item) for item in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _plain(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        # base64, as OTLP/JSON and Jaeger's binary tags write bytes.
        return base64.b64encode(value.bytes_value).decode("ascii")
    return getattr(value, which)


def _bad_ids(request: ExportTraceServiceRequest, source: str) -> TraceReadError:
    """Find the first span with bad ids again, with its position, for the error message."""
    for i, resource_spans in enumerate(request.resource_spans):
        for j, scope_spans in enumerate(resource_spans.scope_spans):
            for k, span in enumerate(scope_spans.spans):
                where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                for field, raw, size in (
                    ("traceId", span.trace_id, TRACE_ID_BYTES),
                    ("spanId", span.span_id, SPAN_ID_BYTES),
                    ("parentSpanId", span.parent_span_id, SPAN_ID_BYTES),
                ):
                    if not raw and field != "parentSpanId":
                        return TraceReadError(source, f"{where}: {field} is missing")
                    if raw and len(raw) != size:
                        return TraceReadError(
                            source, f"{where}: {field} has {len(raw)} bytes, expected {size}"
                        )
    return TraceReadError(source, "a span has invalid ids")


def _hex_ids_to_base64(document: dict[str, Any], source: str) -> None:
    resource_spans = document.get("resourceSpans")
    if not isinstance(resource_spans, list):
        return  # ParseDict reports the wrong type
    for i, resource in enumerate(resource_spans):
        if not isinstance(resource, dict):
            continue
        if "scopeSpans" not in resource and "instrumentationLibrarySpans" in resource:
            # OTLP before 0.15 (2021) named these differently; some old files still do.
            resource["scopeSpans"] = resource.pop("instrumentationLibrarySpans")
        scope_spans = resource.get("scopeSpans")
        if not isinstance(scope_spans, list):
            continue
        for j, scope in enumerate(scope_spans):
            spans = scope.get("spans") if isinstance(scope, dict) else None
            if not isinstance(spans, list):
                continue
            for k, span in enumerate(spans):
                if not isinstance(span, dict):
                    continue
                where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                for key, size in _ID_FIELDS:
                    _hex_to_base64(span, key, size, where, source)
                links = span.get("links")
                if isinstance(links, list):
                    for n, link in enumerate(links):
                        if isinstance(link, dict):
                            for key, size in _ID_FIELDS[:2]:
                                _hex_to_base64(link, key, size, f"{where}.links[{n}]", source)


def _hex_to_base64(obj: dict[str, Any], key: str, size: int, where: str, source: str) -> None:
    text = obj.get(key)
    if text is None or text == "":
        return  # absent: a missing trace or span id is reported after decoding
    if not isinstance(text, str):
        raise TraceReadError(source, f"{where}.{key} must be a hex string, not {text!r}")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise TraceReadError(source, f"{where}.{key} is not hex: {text!r}") from None
    if len(raw) != size:
        raise TraceReadError(
            source, f"{where}.{key} has {len(text)} hex digits, expected {2 * size}: {text!r}"
        )
    obj[key] = base64.b64encode(raw).decode("ascii")
