"""A small OpenAI-compatible LLM server for tests: a real ASGI app streaming vLLM-format SSE,
whose behaviour the requested model picks (see `FakeLLM`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from tests.support.servers import read_asgi_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

ANSWER = ["Hello", " from", " the", " fake", " LLM", "."]


@dataclass
class Recorded:
    headers: dict[str, str]
    body: dict[str, Any]
    client_port: int = 0
    disconnected: threading.Event = field(default_factory=threading.Event)


def _chunk(request_id: str, model: str, delta: dict[str, Any], finish: str | None) -> str:
    # vLLM 0.33 serialises chunks with exclude_unset; this mirrors its key order.
    payload = {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


class FakeLLM:
    """The ASGI app; `requests` holds what it received, newest last.

    `test-model` answers normally, `fail-500` fails before streaming, `stall-500` sends a
    500 status but never its body, `drop-mid-stream` breaks the connection after two chunks,
    `slow` streams for a long time.
    """

    def __init__(self, chunk_delay_seconds: float = 0.0) -> None:
        self.requests: list[Recorded] = []
        self.chunk_delay_seconds = chunk_delay_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        raw = await read_asgi_body(receive)
        if scope["path"].endswith("/models"):
            card = {"id": "test-model", "object": "model", "created": 0, "owned_by": "vllm"}
            await self._json(send, 200, {"object": "list", "data": [card]})
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        body = json.loads(raw or b"{}")
        client_port = (scope.get("client") or ("", 0))[1]
        record = Recorded(headers=headers, body=body, client_port=client_port)
        self.requests.append(record)
        model = str(body.get("model", ""))
        if model == "fail-500":
            error = {"error": {"message": "engine exploded", "type": "InternalServerError"}}
            await self._json(send, 500, error)
            return
        if model == "stall-500":
            json_type = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 500, "headers": json_type})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._watch_disconnect(receive, record), 10)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
            }
        )
        watcher = asyncio.ensure_future(self._watch_disconnect(receive, record))
        try:
            await self._stream(send, model, body, record)
        finally:
            watcher.cancel()

    async def _watch_disconnect(self, receive: Receive, record: Recorded) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        record.disconnected.set()

    async def _stream(self, send: Send, model: str, body: dict[str, Any], record: Recorded) -> None:
        rid = "chatcmpl-test"
        words = ANSWER * 400 if model == "slow" else ANSWER
        delay = 0.05 if model == "slow" else self.chunk_delay_seconds

        async def emit(text: str, more: bool = True) -> None:
            await send({"type": "http.response.body", "body": text.encode(), "more_body": more})

        await emit(_chunk(rid, model, {"role": "assistant", "content": ""}, None))
        for index, word in enumerate(words):
            if record.disconnected.is_set():
                return
            if model == "drop-mid-stream" and index == 2:
                raise ConnectionAbortedError("upstream dropped the stream on purpose")
            if delay:
                await asyncio.sleep(delay)
            await emit(_chunk(rid, model, {"content": word}, None))
        await emit(_chunk(rid, model, {"content": ""}, "stop"))
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body["messages"])
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + len(words),
            "completion_tokens": len(words),
        }
        if (body.get("stream_options") or {}).get("include_usage"):
            final = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [],
                "usage": usage,
            }
            await emit(f"data: {json.dumps(final, separators=(',', ':'))}\n\n")
        await emit("data: [DONE]\n\n", more=False)

    @staticmethod
    async def _json(send: Send, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": data})
