"""Jaeger UI / `/api/traces` JSON (`{"data": [trace, ...]}` or one trace object) into spans.

Tags that Jaeger derives from OTLP fields (span kind, status, scope) become those fields
again, and span logs become span events (named by their `event` field, as Jaeger names an
OTLP event), so a trace reads the same from Jaeger as from the OTLP it was stored from.
"""

from __future__ import annotations

from typing import Any

from spanbudget.common.semconv import HOST_ID, HOST_NAME

from ..spans import AttrValue, Span, SpanEvent, SpanKind, first_events
from ._errors import TraceReadError

__all__ = ["spans_from_jaeger_trace", "spans_from_jaeger_ui"]

UNKNOWN_SERVICE = "unknown_service"
# The log field that holds an OTLP event's name (Jaeger's OTLP translator writes it so).
EVENT_NAME_FIELD = "event"
TRACE_ID_HEX = 32
SPAN_ID_HEX = 16

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_KINDS = {kind.value: kind for kind in SpanKind}
# The tags Jaeger's OTLP translator writes for OTLP span fields; it drops them on the way back.
_HOST_TAGS = (HOST_NAME, HOST_ID, "hostname")  # in the order they are preferred
_DERIVED_TAGS = frozenset(
    {
        "span.kind",
        "error",
        "otel.status_code",
        "otel.status_description",
        "otel.scope.name",
        "otel.scope.version",
        "otel.library.name",
        "otel.library.version",
        "w3c.tracestate",
    }
)


def spans_from_jaeger_ui(document: dict[str, Any], source: str) -> list[Span]:
    """Spans of a UI response `{"data": [trace, ...], "errors": ...}`."""
    traces = document.get("data")
    if traces is None:
        errors = document.get("errors")
        if errors:
            raise TraceReadError(source, f"Jaeger reported errors and no data: {errors}")
        return []
    if not isinstance(traces, list):
        raise TraceReadError(source, f'"data" must be a list of traces, not {_kind_of(traces)}')
    spans: list[Span] = []
    for i, trace in enumerate(traces):
        spans.extend(spans_from_jaeger_trace(trace, source, f"data[{i}]"))
    return spans


def spans_from_jaeger_trace(trace: Any, source: str, where: str = "trace") -> list[Span]:
    """Spans of one UI trace object `{"traceID", "spans": [...], "processes": {...}}`."""
    if not isinstance(trace, dict):
        raise TraceReadError(source, f"{where} must be a trace object, not {_kind_of(trace)}")
    raw_spans = trace.get("spans")
    if not isinstance(raw_spans, list):
        raise TraceReadError(source, f"{where}.spans must be a list, not {_kind_of(raw_spans)}")
    processes = trace.get("processes") or {}
    if not isinstance(processes, dict):
        raise TraceReadError(source, f"{where}.processes must be an object")
    return [
        _span(raw, processes, trace.get("traceID"), source, f"{where}.spans[{n}]")
        for n, raw in enumerate(raw_spans)
    ]


def _span(raw: Any, processes: dict[str, Any], trace_id: Any, source: str, where: str) -> Span:
    if not isinstance(raw, dict):
        raise TraceReadError(source, f"{where} must be a span object, not {_kind_of(raw)}")
    trace_id = _hex_id(raw.get("traceID", trace_id), TRACE_ID_HEX, f"{where}.traceID", source)
    span_id = _hex_id(raw.get("spanID"), SPAN_ID_HEX, f"{where}.spanID", source)
    start_us = _integer(raw.get("startTime"), f"{where}.startTime", source)
    duration_us = _integer(raw.get("duration", 0), f"{where}.duration", source)
    name = raw.get("operationName", "")
    if not isinstance(name, str):
        raise TraceReadError(source, f"{where}.operationName must be a string")

    attributes: dict[str, AttrValue] = {}
    kind = SpanKind.INTERNAL
    error = False
    scope: str | None = None
    tags = raw.get("tags") or []
    if not isinstance(tags, list):
        raise TraceReadError(source, f"{where}.tags must be a list")
    for n, tag in enumerate(tags):
        key, value = _tag(tag, f"{where}.tags[{n}]", source)
        if key == "span.kind":
            kind = _KINDS.get(str(value).lower(), SpanKind.INTERNAL)
        elif key == "error":
            error = error or value is True or value == "true"
        elif key == "otel.status_code":
            error = error or value == "ERROR"
        elif key in ("otel.scope.name", "otel.library.name") and isinstance(value, str):
            scope = value or scope
        if key not in _DERIVED_TAGS:
            attributes[key] = value

    start_ns = start_us * 1000
    process = _process(raw, processes)
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        name=name,
        start_ns=start_ns,
        end_ns=start_ns + max(duration_us, 0) * 1000,
        parent_span_id=_parent(raw.get("references"), trace_id, f"{where}.references", source),
        kind=kind,
        service=_service(process),
        attributes=attributes,
        error=error,
        events=_events(raw.get("logs"), f"{where}.logs", source),
        host=_host(process),
        scope=scope,
    )


def _events(logs: Any, where: str, source: str) -> tuple[SpanEvent, ...]:
    """Span logs as events: a log's name is its `event` field; a log without one has none."""
    if not logs:
        return ()
    if not isinstance(logs, list):
        raise TraceReadError(source, f"{where} must be a list")
    named: list[tuple[str, int]] = []
    for n, log in enumerate(logs):
        if not isinstance(log, dict):
            raise TraceReadError(source, f"{where}[{n}] must be an object")
        timestamp_us = _integer(log.get("timestamp"), f"{where}[{n}].timestamp", source)
        fields = log.get("fields")
        if fields is None:
            continue
        if not isinstance(fields, list):
            raise TraceReadError(source, f"{where}[{n}].fields must be a list")
        for m, raw_field in enumerate(fields):
            key, value = _tag(raw_field, f"{where}[{n}].fields[{m}]", source)
            if key == EVENT_NAME_FIELD:
                named.append((str(value), timestamp_us * 1000))
                break
    return first_events(named)


def _parent(references: Any, trace_id: str, where: str, source: str) -> str | None:
    """Jaeger's own rule: the first CHILD_OF in the same trace, else the first FOLLOWS_FROM."""
    if not references:
        return None
    if not isinstance(references, list):
        raise TraceReadError(source, f"{where} must be a list")
    follows_from: str | None = None
    for n, ref in enumerate(references):
        if not isinstance(ref, dict):
            raise TraceReadError(source, f"{where}[{n}] must be an object")
        ref_trace = _hex_id(ref.get("traceID", trace_id), TRACE_ID_HEX, f"{where}[{n}]", source)
        if ref_trace != trace_id:
            continue
        ref_span = _hex_id(ref.get("spanID"), SPAN_ID_HEX, f"{where}[{n}].spanID", source)
        ref_type = ref.get("refType", "CHILD_OF")
        if ref_type == "CHILD_OF":
            return ref_span
        if ref_type == "FOLLOWS_FROM" and follows_from is None:
            follows_from = ref_span
    return follows_from


def _process(raw: dict[str, Any], processes: dict[str, Any]) -> dict[str, Any] | None:
    # /api/traces refers to processes by id; the older embedded form carries the process.
    process = raw.get("process")
    if not isinstance(process, dict):
        process = processes.get(raw.get("processID", ""))
    return process if isinstance(process, dict) else None


def _service(process: dict[str, Any] | None) -> str:
    name = process.get("serviceName") if process is not None else None
    return name if isinstance(name, str) and name else UNKNOWN_SERVICE


def _host(process: dict[str, Any] | None) -> str | None:
    """The process's host (DESIGN §5 rule 3): its `host.name` tag (OTLP resources become
    process tags), else `host.id`, else `hostname` (what Jaeger's own clients set)."""
    tags = process.get("tags") if process is not None else None
    if not isinstance(tags, list):
        return None
    found: dict[str, str] = {}
    for tag in tags:
        if isinstance(tag, dict) and tag.get("key") in _HOST_TAGS:
            value = tag.get("value")
            if isinstance(value, str | int) and not isinstance(value, bool) and value != "":
                found[tag["key"]] = str(value)
    return next((found[key] for key in _HOST_TAGS if key in found), None)


def _tag(tag: Any, where: str, source: str) -> tuple[str, AttrValue]:
    if not isinstance(tag, dict) or not isinstance(tag.get("key"), str):
        raise TraceReadError(source, f"{where} must be an object with a string key")
    value = tag.get("value")
    kind = tag.get("type", "string")
    if kind == "int64":
        return tag["key"], _integer(value, f"{where}.value", source)
    if kind == "float64":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise TraceReadError(source, f"{where}.value must be a number, not {value!r}")
        try:
            return tag["key"], float(value)
        except ValueError:
            raise TraceReadError(source, f"{where}.value is not a number: {value!r}") from None
    if kind == "bool":
        return tag["key"], value is True or value == "true"
    if isinstance(value, str | bool | int | float):
        return tag["key"], value  # string and binary (base64 text) tags
    raise TraceReadError(source, f"{where}.value must be a scalar, not {_kind_of(value)}")


def _hex_id(value: Any, width: int, where: str, source: str) -> str:
    """A Jaeger id as lowercase hex; Jaeger drops the high half of 64-bit trace ids: pad it."""
    if not isinstance(value, str) or not value:
        raise TraceReadError(source, f"{where} is missing")
    if len(value) > width:
        raise TraceReadError(
            source, f"{where} has {len(value)} hex digits, at most {width}: {value!r}"
        )
    if not all(c in _HEX_DIGITS for c in value):
        raise TraceReadError(source, f"{where} is not hex: {value!r}")
    return value.lower().rjust(width, "0")


def _integer(value: Any, where: str, source: str) -> int:
    """An int64 as JSON writes it: a number, or a string when it exceeds 2**53."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    if value is None:
        raise TraceReadError(source, f"{where} is missing")
    raise TraceReadError(source, f"{where} must be an integer, not {value!r}")


def _kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__
