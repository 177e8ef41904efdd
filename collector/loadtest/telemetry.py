"""The load tester's tracer provider: root spans go to the budget collector over OTLP/HTTP."""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = ["LOADTEST_SERVICE", "loadtest_tracer_provider"]

LOADTEST_SERVICE = "spanbudget-loadtest"


def loadtest_tracer_provider(
    collector_url: str, env: Mapping[str, str] | None = None
) -> TracerProvider:
    """Spans to the OTLP endpoint the `OTEL_EXPORTER_OTLP_*` variables name, else the collector.

    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as is; `OTEL_EXPORTER_OTLP_ENDPOINT` and
    `collector_url` get `/v1/traces` appended, as the OTLP exporter specification says.

    `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` apply as usual.
    """
    env = os.environ if env is None else env
    attributes = {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: LOADTEST_SERVICE}
    provider = TracerProvider(resource=Resource.create(attributes))
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
        (base or collector_url).rstrip("/") + "/v1/traces"
    )
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), schedule_delay_millis=200)
    )
    return provider
