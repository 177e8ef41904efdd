"""Test spans as OTLP: `ExportTraceServiceRequest` messages and OTLP/JSON as exporters write it."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
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
    """One ResourceSpans per service, in first-seen order."""
    request = ExportTraceServiceRequest()
    by_service: dict[str, list[Span]] = {}
    for span in spans:
        by_service.setdefault(span.service, []).append(span)
    for service, items in by_service.items():
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.append(
            KeyValue(key="service.name", value=AnyValue(string_value=service))
        )
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "tests"
        for span in items:
            out = scope_spans.spans.add()
            out.trace_id = bytes.fromhex(span.trace_id)
            out.span_id = bytes.fromhex(span.span_id)
            if span.parent_span_id:
                out.parent_span_id = bytes.fromhex(span.parent_span_id)
            out.name = span.name
            out.kind = span.kind.to_otlp()
            out.start_time_unix_nano = span.start_ns
            out.end_time_unix_nano = span.end_ns
            for key, value in span.attributes.items():
                out.attributes.append(KeyValue(key=key, value=_any_value(value)))
            if span.error:
                out.status.code = Status.STATUS_CODE_ERROR
    return request


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
