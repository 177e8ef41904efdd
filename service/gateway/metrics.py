"""The gateway's own Prometheus metrics: requests by status and in flight, process health.

Per-stage latency is the budget collector's job (from the spans); these say whether the
gateway is up and answering, for the scrape job in `deploy/prometheus/prometheus.yml`.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    PlatformCollector,
    ProcessCollector,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["GatewayMetrics", "MetricsMiddleware"]


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.requests = Counter(
            "rag_gateway_requests",
            "Chat completion requests answered, by HTTP status.",
            ["code"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "rag_gateway_requests_in_flight",
            "Chat completion requests being answered (streams included).",
            registry=self.registry,
        )


class MetricsMiddleware:
    """Counts `/v1/chat/completions` requests; a stream stays in flight until it ends."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        status = "500"

        async def counting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = str(message["status"])
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, counting_send)
        finally:
            self.metrics.in_flight.dec()
            self.metrics.requests.labels(status).inc()
