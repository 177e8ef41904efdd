"""One load-test request against a target that misbehaves: recorded as an error, never raised,
and its root span always ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from spanbudget.collector.loadtest.client import ChatRequest, RequestRecord, send_chat
from spanbudget.collector.loadtest.http1 import StreamingClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.support.servers import ServerThread

# Valid SSE whose JSON is not a chunk object: a broken or foreign server.
BAD_EVENTS = [b"data: 123\n\n", b'data: ["a"]\n\n', b'data: {"choices": 7}\n\n']


def one_event_app(event: bytes) -> Starlette:
    async def chat(request: Request) -> StreamingResponse:
        async def stream() -> AsyncIterator[bytes]:
            yield event
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.mark.parametrize("event", BAD_EVENTS)
def test_a_malformed_stream_is_a_failed_request_with_an_ended_span(event: bytes) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def run(url: str) -> RequestRecord:
        async with StreamingClient(max_connections=1) as client:
            return await send_chat(
                client,
                provider.get_tracer("t"),
                ChatRequest(0, "main", 0.0, "hi", 4),
                url=f"{url}/v1/chat/completions",
                model="m",
                run_id="run-bad",
                run_start_perf=0.0,
            )

    with ServerThread(one_event_app(event)) as server:
        record = asyncio.run(run(server.url))
    assert not record.ok
    assert record.error
    spans = exporter.get_finished_spans()
    assert len(spans) == 1
    assert spans[0].status.status_code is StatusCode.ERROR
