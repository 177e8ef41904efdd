"""A running collector for tests (uvicorn on 127.0.0.1, ephemeral port) and OTLP encoders."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response
from opentelemetry import trace as trace_api
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.core.decisions import VerdictSink
from spanbudget.collector.live.app import app_for
from spanbudget.collector.live.pipeline import Pipeline, assemble
from spanbudget.collector.live.settings import CollectorSettings
from spanbudget.collector.spans import Span, SpanKind

from tests.support.otlp import request_to_json, to_request
from tests.support.servers import ServerThread

REPO = Path(__file__).resolve().parents[2]
BUDGET = REPO / "budget.yaml"
_SDK_KINDS = {
    SpanKind.INTERNAL: trace_api.SpanKind.INTERNAL,
    SpanKind.SERVER: trace_api.SpanKind.SERVER,
    SpanKind.CLIENT: trace_api.SpanKind.CLIENT,
    SpanKind.PRODUCER: trace_api.SpanKind.PRODUCER,
    SpanKind.CONSUMER: trace_api.SpanKind.CONSUMER,
}


class Collector:
    """A pipeline, its app on a real port, and helpers to query it."""

    def __init__(self, pipeline: Pipeline, registry: CollectorRegistry, url: str) -> None:
        self.pipeline = pipeline
        self.registry = registry
        self.url = url
        self.client = httpx.Client(base_url=url, timeout=10)

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def verdict(self, trace_id: str, timeout: float = 10.0) -> dict[str, Any]:
        """Poll the API until the trace's verdict is there."""
        deadline = time.monotonic() + timeout
        while True:
            response = self.client.get(f"/api/verdicts/{trace_id}")
            if response.status_code == 200:
                return response.json()  # type: ignore[no-any-return]
            assert response.status_code == 404, response.text
            if time.monotonic() > deadline:
                raise AssertionError(f"no verdict for {trace_id} within {timeout} s")
            time.sleep(0.05)

    @property
    def grpc_address(self) -> str:
        """Where its OTLP/gRPC listens (started with `grpc_listen`)."""
        grpc = self.pipeline.grpc
        assert grpc is not None, "started without grpc_listen"
        assert grpc.serving
        return grpc.address

    def post(self, body: bytes, content_type: str, **headers: str) -> httpx.Response:
        return self.client.post(
            "/v1/traces", content=body, headers={"Content-Type": content_type, **headers}
        )


def idle_pipeline(tmp_path: Path) -> Pipeline:
    """A pipeline whose worker is not started: nothing drains its intake queue."""
    settings = CollectorSettings.from_flat(
        db_path=tmp_path / "v.db",
        budget_path=BUDGET,
        retention_seconds=60,
        retention_count=10,
        grpc_listen="off",
    )
    return assemble(settings, load_budget(BUDGET).budget, alerts=False)


@contextmanager
def running_collector(
    tmp_path: Path,
    *,
    sinks: Sequence[VerdictSink] = (),
    forward_url: str | None = None,
    alerts: bool = False,
    **overrides: Any,
) -> Iterator[Collector]:
    """A collector as `spanbudget collect` assembles it, with a short decision wait and its
    stores under `tmp_path`; `sinks` see the verdicts first; with `alerts` it runs the
    burn-rate rules (`alert_*`, `alertmanager`, `webhook` settings) and serves /api/alerts.
    OTLP/gRPC is off unless `grpc_listen` is given (`127.0.0.1:0`: a free port)."""
    values: dict[str, Any] = {
        "db_path": tmp_path / "verdicts.db",
        "budget_path": BUDGET,
        "decision_wait_seconds": 0.2,
        "forward_otlp": forward_url,
        "forward_backoff_seconds": 0.05,
        "forward_backoff_max_seconds": 0.2,
        "forward_timeout_seconds": 2.0,
        "grpc_listen": "off",
        **overrides,
    }
    settings = CollectorSettings.from_flat(**values)
    registry = CollectorRegistry()
    pipeline = assemble(
        settings,
        load_budget(settings.budget_path or BUDGET).budget,
        registry=registry,
        alerts=alerts,
        sinks=sinks,
    )
    pipeline.start()
    try:
        with ServerThread(app_for(pipeline), lifespan="on") as server:  # starts OTLP/gRPC
            collector = Collector(pipeline, registry, server.url)
            try:
                yield collector
            finally:
                collector.client.close()
    finally:
        pipeline.close()


# -- OTLP encoding of test spans -----------------------------------------------------------


def otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON as the spec writes it: hex ids, camelCase, int64 as strings."""
    return request_to_json(request).encode()


def replay_with_sdk(
    spans: Sequence[Span], exporters: dict[str, Any], *, extra_processor: Any = None
) -> tuple[str, list[TracerProvider]]:
    """Recreate `spans` (same shapes and times, new ids) with the real OTel SDK.

    One TracerProvider per service (never the global one), each exporting through
    `exporters[service]` (and `extra_processor`, shared); returns the new trace id and providers.
    """
    providers: dict[str, TracerProvider] = {}
    for service, exporter in exporters.items():
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        if extra_processor is not None:
            provider.add_span_processor(extra_processor)
        providers[service] = provider
    made: dict[str, Any] = {}
    trace_id = ""
    for span in spans:  # parents come before children in the builders' order
        tracer = providers[span.service].get_tracer("tests")
        parent = made.get(span.parent_span_id or "")
        context = trace_api.set_span_in_context(parent) if parent is not None else None
        sdk_span = tracer.start_span(
            span.name,
            context=context,
            kind=_SDK_KINDS[span.kind],
            attributes=dict(span.attributes),
            start_time=span.start_ns,
        )
        if span.error:
            sdk_span.set_status(trace_api.Status(trace_api.StatusCode.ERROR))
        made[span.span_id] = sdk_span
        trace_id = format(sdk_span.get_span_context().trace_id, "032x")
    for span in reversed(spans):  # children end first, as in real life
        made[span.span_id].end(end_time=span.end_ns)
    return trace_id, list(providers.values())


def memory_exporters(services: Sequence[str]) -> dict[str, InMemorySpanExporter]:
    return {service: InMemorySpanExporter() for service in services}


def comparable(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict without what differs between two runs of the same trace shape."""
    return {
        k: v
        for k, v in verdict.items()
        if k not in ("trace_id", "evaluated_at", "spans", "late_spans")
    }


PROTOBUF = "application/x-protobuf"


class Receiver:
    """A minimal OTLP/HTTP trace receiver that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: dict[bytes, tuple[str, Any]] = {}  # span id -> (service, span)
        self.lock = threading.Lock()
        self.requests = 0
        self.app = FastAPI()

        @self.app.post("/v1/traces")
        async def traces(request: Request) -> Response:
            decoded = ExportTraceServiceRequest.FromString(await request.body())
            with self.lock:
                self.requests += 1
                for resource_spans in decoded.resource_spans:
                    service = next(
                        kv.value.string_value
                        for kv in resource_spans.resource.attributes
                        if kv.key == "service.name"
                    )
                    for scope_spans in resource_spans.scope_spans:
                        assert scope_spans.scope.name == "tests"
                        for span in scope_spans.spans:
                            self.spans[span.span_id + span.trace_id] = (service, span)
            return Response(b"", media_type=PROTOBUF)

    def count(self) -> int:
        with self.lock:
            return len(self.spans)


def attributes_of(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        which = kv.value.WhichOneof("value")
        if which == "array_value":
            out[kv.key] = [v.string_value for v in kv.value.array_value.values]
        else:
            out[kv.key] = getattr(kv.value, which)
    return out


def send_spans(collector: Collector, spans: list[Any]) -> None:
    response = collector.post(to_request(spans).SerializeToString(), PROTOBUF)
    assert response.status_code == 200
