"""`spanbudget loadtest --delay`: the fault header a drill slows a stage with (the runs
`compare` is measured on), sent on every request as given and refused when malformed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from spanbudget.app.cli import app
from spanbudget.collector.loadtest.client import DELAY_HEADER, ChatRequest, parse_delay
from spanbudget.collector.loadtest.runner import RunSettings, run_requests
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route
from typer.testing import CliRunner

from tests.support.servers import ServerThread


def _recording_app(seen: list[str | None]) -> Starlette:
    async def chat(request: Request) -> StreamingResponse:
        seen.append(request.headers.get(DELAY_HEADER))

        async def stream() -> AsyncIterator[bytes]:
            yield b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.mark.parametrize("delay", ["retrieval=15", ""])
def test_every_request_carries_the_delay_header_when_asked(delay: str) -> None:
    seen: list[str | None] = []
    requests = [ChatRequest(i, "main", i * 0.01, "hi", 4) for i in range(3)]
    with ServerThread(_recording_app(seen)) as server:
        settings = RunSettings(f"{server.url}/v1/chat/completions", "m", "run-d", delay=delay)
        records = asyncio.run(run_requests(requests, settings, TracerProvider().get_tracer("t")))
    assert all(r.ok for r in records), [r.error for r in records]
    assert seen == [delay or None] * 3


def test_delays_are_checked_and_written_as_the_gateway_reads_them() -> None:
    assert parse_delay("Retrieval=15, prompt=2.5") == "retrieval=15,prompt=2.5"
    for bad, says in [
        ("prefill=10", "STAGE one of gateway, retrieval, prompt"),
        ("retrieval", "not STAGE=MS"),
        ("retrieval=fast", "not a number"),
        ("retrieval=0", "within 0..10000"),
    ]:
        with pytest.raises(ValueError, match=says):
            parse_delay(bad)


def test_a_bad_delay_exits_2_before_sending_anything() -> None:
    result = CliRunner().invoke(
        app, ["loadtest", "--target", "http://127.0.0.1:9", "--delay", "prefill=10"]
    )
    assert result.exit_code == 2
    assert "--delay: 'prefill=10' is not STAGE=MS" in result.output
