"""The load tester's tracer provider: root spans go to the budget collector over OTLP/HTTP."""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = ["DEFAULT_COLLECTOR", "LOADTEST_SERVICE", "loadtest_tracer_provider", "span_endpoint"]

LOADTEST_SERVICE = "spanbudget-loadtest"
DEFAULT_COLLECTOR = "http://127.0.0.1:4318"


def span_endpoint(collector_url: str | None, env: Mapping[str, str]) -> str:
    """Where the root spans go, first match wins:

    1. `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, as is: a route chosen for traces on purpose
       (through an OTel Collector, say, that fans out to Jaeger and the budget collector);
    2. `collector_url`, the `--collector` the user gave: the verdicts are joined from there,
       so a general `OTEL_EXPORTER_OTLP_ENDPOINT` left in the shell must not send the
       spans elsewhere;
    3. `OTEL_EXPORTER_OTLP_ENDPOINT`;
    4. the collector on its default address.

    Base URLs get `/v1/traces` appended, as the OTLP exporter specification says.
    """
    if endpoint := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return endpoint
    base = collector_url or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_COLLECTOR
    return base.rstrip("/") + "/v1/traces"


def loadtest_tracer_provider(
    collector_url: str | None, env: Mapping[str, str] | None = None
) -> TracerProvider:
    """The load tester's provider, exporting to `span_endpoint(collector_url, env)`.

    `collector_url` is None when the user did not name a collector. `OTEL_SERVICE_NAME`
    and `OTEL_RESOURCE_ATTRIBUTES` apply as usual.
    """
    env = os.environ if env is None else env
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: LOADTEST_SERVICE}
    provider = TracerProvider(resource=Resource.create(attributes))
    endpoint = span_endpoint(collector_url, env)
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), schedule_delay_millis=200)
    )
    return provider
