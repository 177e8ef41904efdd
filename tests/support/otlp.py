"""Test spans as OTLP: `ExportTraceServiceRequest` messages and OTLP/JSON as exporters write it."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status
from spanbudget.collector.spans import AttrValue, Span


def _any_value(value: AttrValue) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    result = AnyValue()
    result.array_value.values.extend(_any_value(v) for v in value)
    return result


def to_request(spans: Iterable[Span]) -> ExportTraceServiceRequest:
    """One ResourceSpans per service (and host), one ScopeSpans per scope, in first-seen order.

    A span with no scope is written under the scope "tests"; its events are written too.
    """
    request = ExportTraceServiceRequest()
    by_resource: dict[tuple[str, str | None], dict[str, list[Span]]] = {}
    for span in spans:
        scopes = by_resource.setdefault((span.service, span.host), {})
        scopes.setdefault(span.scope or "tests", []).append(span)
    for (service, host), scopes in by_resource.items():
        resource_spans = request.resource_spans.add()
        resource = resource_spans.resource
        resource.attributes.append(
            KeyValue(key="service.name", value=AnyValue(string_value=service))
        )
        if host is not None:
            resource.attributes.append(KeyValue(key="host.name", value=AnyValue(string_value=host)))
        for scope, items in scopes.items():
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = scope
            for span in items:
                _write_span(span, scope_spans.spans.add())
    return request


def _write_span(span: Span, out: OtlpSpan) -> None:
    out.trace_id = bytes.fromhex(span.trace_id)
    out.span_id = bytes.fromhex(span.span_id)
    if span.parent_span_id:
        out.parent_span_id = bytes.fromhex(span.parent_span_id)
    out.name = span.name
    out.kind = OtlpSpan.SpanKind.ValueType(span.kind.to_otlp())
    out.start_time_unix_nano = span.start_ns
    out.end_time_unix_nano = span.end_ns
    for key, value in span.attributes.items():
        out.attributes.append(KeyValue(key=key, value=_any_value(value)))
    for event in span.events:
        out.events.add(name=event.name, time_unix_nano=event.time_ns)
    if span.error:
        out.status.code = Status.STATUS_CODE_ERROR


def to_otlp_json(spans: Sequence[Span]) -> str:
    """OTLP/JSON as the specification writes it: hex ids, camelCase, int64 as strings."""
    return request_to_json(to_request(spans))


def request_to_json(request: ExportTraceServiceRequest) -> str:
    """An OTLP request as OTLP/JSON (hex ids rather than protobuf JSON's base64)."""
    document = json_format.MessageToDict(request)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _b64_to_hex(span[key])
    return json.dumps(document)


def _b64_to_hex(text: str) -> str:
    return base64.b64decode(text).hex()
