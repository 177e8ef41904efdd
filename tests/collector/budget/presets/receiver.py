"""An OTLP/HTTP trace receiver on 127.0.0.1 for the preset tests: it keeps every request
body, passes each one on to a collector as it comes when given one (`forward_to`), and
writes them as OTLP/JSON lines, as the OTel Collector's file exporter does (one
`ExportTraceServiceRequest` a line: camelCase names, hex ids, enums as integers)."""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
from pathlib import Path

import httpx
from fastapi import FastAPI, Request, Response
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from spanbudget.collector.readers import parse_traces
from spanbudget.collector.spans import Span

__all__ = ["Receiver", "otlp_json_line"]

_PROTOBUF = "application/x-protobuf"


class Receiver:
    """Keeps each body posted to /v1/traces (protobuf); acknowledges other signals (an
    exporter's logs or metrics) without keeping them. `forward_to`: a collector's base URL
    that gets each body before the exporter gets its answer."""

    def __init__(self, forward_to: str | None = None) -> None:
        self.bodies: list[bytes] = []
        self.forward_to = forward_to
        self.last_arrival = 0.0  # time.monotonic() of the latest body
        self.lock = threading.Lock()
        self.app = FastAPI()

        @self.app.post("/v1/traces")
        async def traces(request: Request) -> Response:
            body = await request.body()
            if request.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if "json" in request.headers.get("content-type", ""):
                message = json_format.Parse(body, ExportTraceServiceRequest())
                body = message.SerializeToString()
            if self.forward_to is not None:
                async with httpx.AsyncClient(base_url=self.forward_to, timeout=10) as client:
                    sent = await client.post(
                        "/v1/traces", content=body, headers={"Content-Type": _PROTOBUF}
                    )
                    sent.raise_for_status()
            with self.lock:
                self.bodies.append(body)
                self.last_arrival = time.monotonic()
            return Response(b"", media_type=_PROTOBUF)

        @self.app.post("/v1/{signal}")
        async def other(signal: str) -> Response:
            return Response(b"", media_type=_PROTOBUF)

    def spans(self) -> list[Span]:
        with self.lock:
            bodies = list(self.bodies)
        return [span for body in bodies for span in parse_traces(body, "OTLP request")]

    def write(self, path: Path) -> None:
        """Every body so far as OTLP/JSON lines, in the order they came."""
        with self.lock:
            bodies = list(self.bodies)
        lines = [otlp_json_line(ExportTraceServiceRequest.FromString(body)) for body in bodies]
        path.write_text("".join(line + "\n" for line in lines))


def otlp_json_line(request: ExportTraceServiceRequest) -> str:
    """One request as the OTel Collector's file exporter writes it."""
    document = json_format.MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if link.get(key):
                            link[key] = base64.b64decode(link[key]).hex()
    return json.dumps(document, separators=(",", ":"))
