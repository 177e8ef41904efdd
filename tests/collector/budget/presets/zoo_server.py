"""The zoo's OpenAI-compatible server, traced by opentelemetry-instrumentation-fastapi: its
spans (a SERVER span per request, and the ASGI middleware's `http send` span per message it
sends) join the app's trace wherever the app passes its context on.

    python zoo_server.py --port PORT --otlp URL [--engine URL]

Serves /v1/chat/completions (streamed as SSE `data: {...}` chunks then `data: [DONE]`, or
whole), /v1/embeddings and /v1/models. Per request, the `x-zoo` header (`key=value` pairs
separated by `;`) sets:

    hold_ms=N      hold the response headers back N ms
    role_first=1   the first chunk carries only the role; the first content comes 100 ms later
    upstream=1     stream from the engine emulator at --engine instead (vLLM's llm_request
                   spans); propagate=0 keeps the trace context from it

A stream's first chunk leaves 40 ms after the headers, then 8 content chunks 5 ms apart,
a `finish_reason` chunk and a usage chunk. It runs in a venv of its own (venvs.py) and
imports nothing from spanbudget.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from opentelemetry import propagate
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

MODEL = "zoo-model"
EMBED_MODEL = "zoo-embed"
WORDS = ["Two", ",", " three", ",", " five", ".", " Done", "."]
FIRST_CHUNK_S = 0.040
GAP_S = 0.005
ROLE_FIRST_GAP_S = 0.100


app = FastAPI()
engine: dict[str, Any] = {"url": None, "model": None}


def controls(request: Request) -> dict[str, float]:
    found = {"hold_ms": 0.0, "role_first": 0.0, "upstream": 0.0, "propagate": 1.0}
    for part in request.headers.get("x-zoo", "").split(";"):
        if "=" in part:
            key, value = part.split("=", 1)
            found[key.strip()] = float(value)
    return found


def chunk(cid: str, delta: dict[str, str], finish: str | None = None) -> str:
    body = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "system_fingerprint": "zoo",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Words plus four a message: the same count for the same messages, whoever sends them."""
    return sum(len(str(m.get("content", "")).split()) + 4 for m in messages)


@app.post("/v1/chat/completions")
async def chat(request: Request) -> Any:
    c = controls(request)
    body = await request.json()
    if c["upstream"]:
        return StreamingResponse(
            from_engine(body, propagate_context=bool(c["propagate"])),
            media_type="text/event-stream",
        )
    cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
    p_tokens = prompt_tokens(body.get("messages", []))
    if c["hold_ms"]:
        await asyncio.sleep(c["hold_ms"] / 1e3)  # the response headers wait for this
    if not body.get("stream"):
        await asyncio.sleep(FIRST_CHUNK_S + len(WORDS) * GAP_S)
        message = {"role": "assistant", "content": "".join(WORDS)}
        return JSONResponse(
            {
                "id": cid,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": MODEL,
                "system_fingerprint": "zoo",
                "choices": [
                    {"index": 0, "finish_reason": "stop", "logprobs": None, "message": message}
                ],
                "usage": usage(p_tokens, len(WORDS)),
            }
        )
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    async def events() -> AsyncIterator[str]:
        await asyncio.sleep(FIRST_CHUNK_S)
        first = {"role": "assistant", "content": WORDS[0]}
        if c["role_first"]:
            yield chunk(cid, {"role": "assistant", "content": ""})
            await asyncio.sleep(ROLE_FIRST_GAP_S)
            first = {"content": WORDS[0]}
        yield chunk(cid, first)
        for word in WORDS[1:]:
            await asyncio.sleep(GAP_S)
            yield chunk(cid, {"content": word})
        yield chunk(cid, {}, "stop")
        if include_usage:
            tail = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": MODEL,
                "choices": [],
                "usage": usage(p_tokens, len(WORDS)),
            }
            yield f"data: {json.dumps(tail)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def from_engine(body: dict[str, Any], *, propagate_context: bool) -> AsyncIterator[str]:
    """The engine emulator's stream, relayed event by event (its model in place of ours)."""
    headers: dict[str, str] = {}
    if propagate_context:
        propagate.inject(headers)  # the SERVER span's context: vLLM's span joins the trace
    async with httpx.AsyncClient(base_url=engine["url"], timeout=30) as client:
        if engine["model"] is None:
            engine["model"] = (await client.get("/v1/models")).json()["data"][0]["id"]
        upstream = {**body, "model": engine["model"]}
        async with client.stream(
            "POST", "/v1/chat/completions", json=upstream, headers=headers
        ) as response:
            async for line in response.aiter_lines():
                if line:
                    yield line + "\n\n"


@app.post("/v1/embeddings")
async def embeddings(request: Request) -> dict[str, Any]:
    body = await request.json()
    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
    await asyncio.sleep(0.010)
    data = []
    for i, text in enumerate(inputs):
        digest = hashlib.sha256(str(text).encode()).digest()
        vector = [(b - 128) / 128 for b in digest[:8]]
        data.append({"object": "embedding", "index": i, "embedding": vector})
    tokens = sum(len(str(t).split()) for t in inputs)
    return {
        "object": "list",
        "data": data,
        "model": EMBED_MODEL,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


@app.get("/v1/models")
async def models() -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": MODEL, "object": "model", "created": 0, "owned_by": "zoo"},
            {"id": EMBED_MODEL, "object": "model", "created": 0, "owned_by": "zoo"},
        ],
    }


@app.get("/health")
async def health() -> dict[str, bool]:
    return {"ok": True}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--otlp", required=True)
    parser.add_argument("--engine")
    args = parser.parse_args()
    engine["url"] = args.engine
    provider = TracerProvider(resource=Resource.create({"service.name": "zoo-server"}))
    exporter = OTLPSpanExporter(endpoint=f"{args.otlp}/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider, excluded_urls="health")
    try:
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    finally:
        provider.shutdown()


if __name__ == "__main__":
    main()
