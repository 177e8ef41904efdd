"""Where the trace page gets a trace's spans: the collector's own span store first, then
Jaeger's API v3 (`GET /api/v3/traces/{trace_id}`) when `--jaeger-url` names one."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httpx

from ..readers import TraceReadError, parse_traces
from ..sinks.span_store import SpanStore
from ..spans import Span

__all__ = ["SpanSource", "TraceSpans"]

log = logging.getLogger(__name__)
_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class TraceSpans:
    spans: list[Span]
    source: str  # "collector" or the Jaeger URL asked


class SpanSource:
    """Spans of one trace, or None with the reason in `why_missing`."""

    def __init__(
        self,
        store: SpanStore | None,
        jaeger_url: str | None,
        *,
        client: httpx.Client | None = None,
    ) -> None:
        self.store = store
        self.jaeger_url = jaeger_url.rstrip("/") if jaeger_url else None
        self._client = client

    def get(self, trace_id: str) -> TraceSpans | str:
        """The spans, or a sentence saying why there are none."""
        if self.store is not None:
            kept = self.store.get(trace_id)
            if kept:
                return TraceSpans(kept, "collector")
        if self.jaeger_url is None:
            return (
                "The collector no longer keeps this trace's spans (or keeps none: "
                "span retention is 0), and no --jaeger-url is set to fetch them from."
            )
        url = f"{self.jaeger_url.removesuffix('/api/v3')}/api/v3/traces/{trace_id}"
        try:
            if self._client is not None:
                response = self._client.get(url, params={"raw_traces": "true"})
            else:
                with httpx.Client(timeout=_TIMEOUT_SECONDS) as client:
                    response = client.get(url, params={"raw_traces": "true"})
        except httpx.HTTPError as exc:
            log.warning("fetching trace %s from Jaeger failed: %r", trace_id, exc)
            return f"Jaeger at {self.jaeger_url} could not be asked: {exc}"
        if response.status_code != httpx.codes.OK:
            return f"Jaeger at {self.jaeger_url} answered HTTP {response.status_code}."
        try:
            spans = [s for s in parse_traces(response.content, url) if s.trace_id == trace_id]
        except TraceReadError as exc:
            return f"Jaeger's answer could not be read: {exc}"
        if not spans:
            return f"Jaeger at {self.jaeger_url} has no spans of this trace."
        return TraceSpans(spans, url)
