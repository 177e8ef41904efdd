"""`GET /api/traces/{trace_id}`: a judged trace's kept spans as OTLP/JSON.

The spans come from the span store (`SpanStore.get`), written as the OTLP/JSON
specification has it (`ExportTraceServiceRequest`, hex ids, camelCase, int64 as
strings), one `ResourceSpans` per service and host, so that `spanbudget check`, the
collector's readers and `spanbudget whatif` read them back as they were judged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, HTTPException

from ..sinks.span_store import SpanStore
from ..spans import AttrValue, Span

__all__ = ["otlp_json", "trace_router"]

_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}\Z")
_STATUS_ERROR = 2  # OTLP's STATUS_CODE_ERROR
_SCOPE = "spanbudget.collector"


def _any_value(value: AttrValue) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    return {"arrayValue": {"values": [_any_value(v) for v in value]}}


def _attributes(pairs: Sequence[tuple[str, AttrValue]]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _any_value(value)} for key, value in pairs]


def _span(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "name": span.name,
        "kind": span.kind.to_otlp(),
        "startTimeUnixNano": str(span.start_ns),
        "endTimeUnixNano": str(span.end_ns),
        "attributes": _attributes(list(span.attributes.items())),
        "status": {"code": _STATUS_ERROR} if span.error else {},
    }
    if span.parent_span_id:
        out["parentSpanId"] = span.parent_span_id
    if span.events:
        out["events"] = [{"timeUnixNano": str(e.time_ns), "name": e.name} for e in span.events]
    return out


def otlp_json(spans: Sequence[Span]) -> dict[str, Any]:
    """Spans as one OTLP/JSON `ExportTraceServiceRequest`: a resource per service and host,
    and in it a scope per instrumentation scope, in the order they first appear;
    `service.name` and `host.name` are what a span keeps of its resource (a span whose
    scope is not known is under spanbudget's own)."""
    resources: dict[tuple[str, str | None], dict[str, list[dict[str, Any]]]] = {}
    for span in spans:
        scopes = resources.setdefault((span.service, span.host), {})
        scopes.setdefault(span.scope or _SCOPE, []).append(_span(span))
    resource_spans = []
    for (service, host), scopes in resources.items():
        pairs: list[tuple[str, AttrValue]] = [("service.name", service)]
        if host is not None:
            pairs.append(("host.name", host))
        resource_spans.append(
            {
                "resource": {"attributes": _attributes(pairs)},
                "scopeSpans": [
                    {"scope": {"name": scope}, "spans": items} for scope, items in scopes.items()
                ],
            }
        )
    return {"resourceSpans": resource_spans}


def trace_router(spans: SpanStore | None) -> APIRouter:
    """The route over the collector's span store (None: it keeps no spans, every trace is
    404). The API token the other `/api/` routes ask for guards it too (the app's
    middleware)."""
    router = APIRouter()

    @router.get("/api/traces/{trace_id}")
    def get_trace(trace_id: str) -> dict[str, Any]:
        if not _TRACE_ID.match(trace_id):
            raise HTTPException(400, "trace_id must be 32 hex digits")
        found = spans.get(trace_id.lower()) if spans is not None else None
        if not found:
            raise HTTPException(404, "no spans kept for this trace (not judged yet, or pruned)")
        return otlp_json(found)

    return router
