"""Who the reference path's processes say they are in their spans' resources: the service,
and, as in users' deployments, the host (`host.name`) and the process (`service.instance.id`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util.types import Attributes
from spanbudget.service.tracers import (
    GATEWAY_SERVICE_NAME,
    build_tracer_provider,
    engine_tracer_provider,
)

from tests.service.conftest import GatewayFactory, chat_body

# What a child process prints: the instance id its provider's resource carries.
_CHILD = """
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spanbudget.service.tracers import build_tracer_provider
provider = build_tracer_provider(
    "rag-gateway", processor=SimpleSpanProcessor(InMemorySpanExporter()), env={}
)
print(provider.resource.attributes["service.instance.id"])
"""


def _exported_resource(provider: TracerProvider, exporter: InMemorySpanExporter) -> Resource:
    provider.get_tracer("tests.service").start_span("probe").end()
    (span,) = exporter.get_finished_spans()
    provider.shutdown()
    return span.resource


def _assert_identifies_host_and_process(attributes: Attributes) -> None:
    assert attributes is not None
    assert attributes["host.name"] == socket.gethostname()
    assert uuid.UUID(str(attributes["service.instance.id"])).version == 4


@pytest.mark.anyio
async def test_gateway_spans_name_their_host_and_process(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway()
    async with gateway.client() as client:
        response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    assert response.status_code == 200
    spans = gateway.spans()
    assert len(spans) > 5
    for span in spans:
        assert span.resource.attributes["service.name"] == GATEWAY_SERVICE_NAME
        _assert_identifies_host_and_process(span.resource.attributes)
    assert len({span.resource.attributes["service.instance.id"] for span in spans}) == 1


def test_engine_spans_keep_vllms_attributes_and_name_their_host_and_process() -> None:
    exporter = InMemorySpanExporter()
    provider = engine_tracer_provider(processor=SimpleSpanProcessor(exporter), env={})
    attributes = _exported_resource(provider, exporter).attributes
    assert attributes["service.name"] == "vllm"
    assert attributes["vllm.process_id"] == os.getpid()
    _assert_identifies_host_and_process(attributes)


def test_otel_resource_attributes_win_over_host_and_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As a Kubernetes deployment sets them: the node and the pod.
    monkeypatch.setenv(
        "OTEL_RESOURCE_ATTRIBUTES", "host.name=gpu-node-7,service.instance.id=vllm-0,team=ml"
    )
    gateway, engine = InMemorySpanExporter(), InMemorySpanExporter()
    providers = [
        (
            build_tracer_provider(GATEWAY_SERVICE_NAME, processor=SimpleSpanProcessor(gateway)),
            gateway,
        ),
        (engine_tracer_provider(processor=SimpleSpanProcessor(engine)), engine),
    ]
    for provider, exporter in providers:
        attributes = _exported_resource(provider, exporter).attributes
        assert attributes["host.name"] == "gpu-node-7"
        assert attributes["service.instance.id"] == "vllm-0"
        assert attributes["team"] == "ml"


def test_one_instance_id_per_process() -> None:
    processor = SimpleSpanProcessor(InMemorySpanExporter())
    here = {
        build_tracer_provider(name, processor=processor, env={}).resource.attributes[
            "service.instance.id"
        ]
        for name in ("rag-gateway", "vllm")
    }
    assert len(here) == 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    )
    assert uuid.UUID(child.stdout.strip()).version == 4
    assert child.stdout.strip() not in here
