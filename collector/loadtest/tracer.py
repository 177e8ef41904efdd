"""The load tester's tracer provider: its root spans go to the budget collector over OTLP/HTTP."""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from spanbudget.common.tracing import (
    DEFAULT_OTLP_ENDPOINT,
    build_tracer_provider,
    otlp_traces_endpoint,
)

__all__ = ["DEFAULT_COLLECTOR", "LOADTEST_SERVICE", "loadtest_tracer_provider"]

LOADTEST_SERVICE = "spanbudget-loadtest"
DEFAULT_COLLECTOR = DEFAULT_OTLP_ENDPOINT


def loadtest_tracer_provider(
    collector_url: str | None, env: Mapping[str, str] | None = None
) -> TracerProvider:
    """The load tester's provider, exporting to `otlp_traces_endpoint(env, base=collector_url)`:
    the `--collector` the user named beats a general `OTEL_EXPORTER_OTLP_ENDPOINT`, since the
    verdicts are joined from there. `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` apply.
    """
    env = os.environ if env is None else env
    endpoint = otlp_traces_endpoint(env, base=collector_url)
    # Flushed often: the run waits for the verdicts of its last requests.
    processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), schedule_delay_millis=200)
    return build_tracer_provider(LOADTEST_SERVICE, processor=processor, env=env)
