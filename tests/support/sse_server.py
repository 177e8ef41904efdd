"""A trivial OpenAI-compatible streaming server on 127.0.0.1, for load-generator tests and benches.

It answers `/v1/chat/completions` with a few SSE chunks at once, and can stall: every
request that arrives inside the stall window (timed from the first request) waits until
the window ends, as a server stuck in a long GC pause or a blocked event loop would.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tests.support.servers import ServerThread


@dataclass
class Stall:
    start_s: float = 0.0  # from `origin`
    length_s: float = 0.0
    origin: float | None = None  # time.monotonic() of the first request: the clock's zero


def sse_app(stall: Stall, chunks: int = 4) -> Starlette:
    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        if stall.origin is None:
            stall.origin = time.monotonic()
        now = time.monotonic() - stall.origin
        if stall.length_s and stall.start_s <= now < stall.start_s + stall.length_s:
            await asyncio.sleep(stall.start_s + stall.length_s - now)

        async def stream() -> AsyncIterator[bytes]:
            for i in range(chunks):
                chunk = {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": body.get("model", "m"),
                    "choices": [
                        {"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}
                    ],
                }
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            usage = {"prompt_tokens": 5, "completion_tokens": chunks, "total_tokens": chunks + 5}
            last = {"id": "chatcmpl-1", "choices": [], "usage": usage}
            yield f"data: {json.dumps(last)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def models(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
        ]
    )


@contextmanager
def serve(app: Starlette) -> Iterator[str]:
    """Run `app` on an ephemeral 127.0.0.1 port in a thread; yield its base URL."""
    with ServerThread(app) as server:
        yield server.url
