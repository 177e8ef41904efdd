"""Builds emulator runtimes for tests and serves them with real uvicorn on an ephemeral port."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import uvicorn
from fastapi import FastAPI
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from spanbudget.service.engine.api import create_app, quiet_deliberate_cuts
from spanbudget.service.engine.faults import StallSchedule, TroubleMaker
from spanbudget.service.engine.generation import OutputPlanner
from spanbudget.service.engine.presets import PRESETS, Preset
from spanbudget.service.engine.runtime import EngineRuntime
from spanbudget.service.engine.tracing import RequestTracer
from spanbudget.service.tracers import build_tracer_provider


@dataclass
class Engine:
    runtime: EngineRuntime
    app: FastAPI
    spans: InMemorySpanExporter
    registry: CollectorRegistry


def preset(base: str = "qwen3-8b-h100", **overrides: Any) -> Preset:
    return PRESETS[base].with_overrides(overrides)


def build_engine(
    preset: Preset,
    planner: OutputPlanner,
    *,
    faults: bool = False,
    trouble: TroubleMaker | None = None,
    stalls: StallSchedule | None = None,
    core: Literal["thread", "process"] = "thread",
    core_priority: Literal["realtime", "normal"] = "realtime",
) -> Engine:
    spans = InMemorySpanExporter()
    provider = build_tracer_provider("vllm", processor=SimpleSpanProcessor(spans), env={})
    registry = CollectorRegistry()
    runtime = EngineRuntime(
        preset,
        planner,
        model_name=preset.model,
        tracer=RequestTracer(provider),
        registry=registry,
        stall_seconds=stalls,
        trouble=trouble,
        faults_enabled=faults,
        core=core,
        core_priority=core_priority,
    )
    return Engine(runtime, create_app(runtime), spans, registry)


@contextlib.asynccontextmanager
async def serve(app: FastAPI) -> AsyncIterator[str]:
    """Run `app` (lifespan included) under uvicorn on 127.0.0.1:<free port>, in this loop."""
    quiet_deliberate_cuts()  # as `spanbudget engine` does at start-up
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def filler_text(words: int) -> str:
    """Plain English filler; about one token per word with Qwen's tokenizer."""
    vocabulary = [
        "the",
        "engine",
        "schedules",
        "every",
        "request",
        "in",
        "order",
        "and",
        "streams",
        "tokens",
        "back",
    ]
    return " ".join(vocabulary[i % len(vocabulary)] for i in range(words))


@dataclass
class StreamResult:
    """What a latency benchmark script records for one streamed request."""

    ttft: float = 0.0
    itl: list[float] = dataclasses.field(default_factory=list)
    text: str = ""
    deltas: int = 0
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    request_id: str = ""
    done: bool = False


async def bench_style_stream(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> StreamResult:
    """Parse SSE the way `vllm bench serve`-style scripts do: strip, drop `data: `, json.loads."""
    result = StreamResult()
    start = time.perf_counter()
    last = start
    async with client.stream("POST", url, json=payload, headers=headers) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            line = line.strip()
            if not line:
                continue
            chunk = line.removeprefix("data: ")
            if chunk == "[DONE]":
                result.done = True
                continue
            data = json.loads(chunk)
            result.request_id = data["id"]
            if choices := data.get("choices"):
                delta = choices[0].get("delta", {})
                content = delta["content"] if "delta" in choices[0] else choices[0]["text"]
                if "role" in delta:
                    continue
                now = time.perf_counter()
                if result.deltas == 0:
                    result.ttft = now - start
                else:
                    result.itl.append(now - last)
                last = now
                result.deltas += 1
                result.text += content or ""
                result.finish_reason = choices[0].get("finish_reason")
            elif usage := data.get("usage"):
                result.usage = usage
    return result
