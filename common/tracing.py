"""A process's tracer provider and where its spans go, for every spanbudget process.

Honours the standard `OTEL_*` variables (service name, resource attributes, exporter
endpoint and headers, sampler, `OTEL_SDK_DISABLED`) through the SDK's own handling, and
defaults to OTLP http/protobuf towards the budget collector on 127.0.0.1:4318. A leaf:
both `spanbudget.service` and `spanbudget.collector` may import it.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from collections.abc import Mapping

from opentelemetry.sdk.resources import HOST_NAME, SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

__all__ = ["DEFAULT_OTLP_ENDPOINT", "build_tracer_provider", "otlp_traces_endpoint"]

DEFAULT_OTLP_ENDPOINT = "http://127.0.0.1:4318"


def otlp_traces_endpoint(env: Mapping[str, str], *, base: str | None = None) -> str:
    """The OTLP/HTTP traces URL, first match wins:

    1. `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, as is: a route chosen for traces on purpose;
    2. `base`, a base URL the user named for this process (the load tester's
       `--collector`, whose verdicts it joins): a general `OTEL_EXPORTER_OTLP_ENDPOINT`
       left in the shell must not send the spans elsewhere;
    3. `OTEL_EXPORTER_OTLP_ENDPOINT`;
    4. the budget collector on its default address.

    Base URLs get `/v1/traces` appended, as the OTLP exporter specification says.
    """
    if traces := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return traces
    root = base or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or DEFAULT_OTLP_ENDPOINT
    return root.rstrip("/") + "/v1/traces"


def build_tracer_provider(
    service_name: str,
    *,
    exporter: SpanExporter | None = None,
    processor: SpanProcessor | None = None,
    resource_attributes: Mapping[str, str | int] | None = None,
    env: Mapping[str, str] | None = None,
) -> TracerProvider:
    """Build (never install globally) a tracer provider for one process.

    `service_name` is the default; `OTEL_SERVICE_NAME` wins over it, as the SDK specifies.
    The resource names the host (`host.name`, the machine's host name) and the process
    (`service.instance.id`, a uuid4 per process), as deployments' resources do; either
    given in `OTEL_RESOURCE_ATTRIBUTES` or `resource_attributes` wins over these defaults.
    With neither `exporter` nor `processor`, spans go over OTLP http/protobuf to
    `otlp_traces_endpoint(env)` through a batch processor. Pass `processor` (for example
    a `SimpleSpanProcessor` around an in-memory exporter) to take full control.
    `resource_attributes` add to the resource (`OTEL_RESOURCE_ATTRIBUTES` still applies).
    """
    env = os.environ if env is None else env
    attributes: dict[str, str | int] = dict(resource_attributes or {})
    if not env.get("OTEL_SERVICE_NAME"):
        attributes[SERVICE_NAME] = service_name
    # The defaults go underneath: whatever the SDK's detectors or the environment say wins.
    resource = _process_identity().merge(Resource.create(attributes))
    provider = TracerProvider(resource=resource)
    if processor is None:
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=otlp_traces_endpoint(env))
        processor = BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider


def _process_identity() -> Resource:
    """Where this process runs and which one it is. The evaluator tells hosts apart by
    `host.name` (their clocks may disagree, DESIGN §5 rule 3), and Jaeger and Prometheus
    tell replicas of one service apart by `service.instance.id`.

    Recent SDKs add a per-process `service.instance.id` of their own
    (`ServiceInstanceIdResourceDetector`), which then wins; this one covers those that don't.
    """
    return Resource(
        {HOST_NAME: socket.gethostname(), SERVICE_INSTANCE_ID: _instance_id(os.getpid())}
    )


@functools.cache
def _instance_id(pid: int) -> str:
    # Keyed on the pid so that a forked child gets an id of its own; every provider one
    # process builds shares its id.
    return str(uuid.uuid4())
