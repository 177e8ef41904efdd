"""Trace readers: OTLP (JSON, JSON lines, protobuf), Jaeger UI JSON and Jaeger API v3, to spans.

Public API::

    class TraceReadError(Exception)          # .source, .message; str() starts with the source
    read_traces(path: Path) -> list[Span]
    parse_traces(data: bytes, source: str) -> list[Span]
    spans_from_otlp(request: ExportTraceServiceRequest, *, source: str = ...) -> list[Span]
    request_from_protobuf(data: bytes, source: str) -> ExportTraceServiceRequest
    request_from_json(document: dict[str, Any], source: str) -> ExportTraceServiceRequest
    read_jaeger_api(base_url: str, service: str, since_seconds: float, *,
                    client: httpx.Client | None = None, limit: int = 100) -> list[Span]

Formats are recognised from the content, never from a file name. Every malformed input
raises `TraceReadError`, never another exception type.
"""

from __future__ import annotations

from ._errors import TraceReadError
from ._formats import parse_traces, read_traces
from ._jaeger_api import read_jaeger_api
from ._otlp import (
    request_from_json,
    request_from_protobuf,
    spans_from_otlp,
)

__all__ = [
    "TraceReadError",
    "parse_traces",
    "read_jaeger_api",
    "read_traces",
    "request_from_json",
    "request_from_protobuf",
    "spans_from_otlp",
]
