"""The `llm_request` span: vLLM's name, kind, scope, resource, parenting and attributes."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from typing import Literal

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from spanbudget.service.engine.generation import OutputPlanner
from spanbudget.service.tokens import TokenCounter

from .harness import bench_style_stream, build_engine, filler_text, preset, serve

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
LATENCIES = (
    "gen_ai.latency.time_in_queue",
    "gen_ai.latency.time_to_first_token",
    "gen_ai.latency.time_in_model_prefill",
    "gen_ai.latency.time_in_model_decode",
    "gen_ai.latency.time_in_model_inference",
    "gen_ai.latency.e2e",
)


def _run(
    planner: OutputPlanner, requests: list[tuple[dict[str, str], dict[str, object]]]
) -> tuple[list[ReadableSpan], list[float]]:
    engine = build_engine(preset("qwen3-8b-a100"), planner)
    starts: list[float] = []

    async def run() -> None:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            for headers, extra in requests:
                body = {"messages": [{"role": "user", "content": filler_text(400)}], "stream": True}
                starts.append(time.time())
                await bench_style_stream(client, "/v1/chat/completions", body | extra, headers)

    asyncio.run(run())
    return list(engine.spans.get_finished_spans()), starts


def _phases(span: ReadableSpan) -> tuple[float, float, float, float]:
    """Time to first token, in queue, in prefill, and e2e, in seconds."""
    attrs = span.attributes or {}
    names = ("time_to_first_token", "time_in_queue", "time_in_model_prefill", "e2e")
    values = [attrs[f"gen_ai.latency.{name}"] for name in names]
    floats = [value for value in values if isinstance(value, float)]
    assert len(floats) == 4, values
    ttft, queue, prefill, e2e = floats
    return ttft, queue, prefill, e2e


@pytest.mark.timing  # the first token within 0.1 s of queue and prefill
def test_llm_request_span_parents_on_traceparent_with_every_attribute(
    planner: OutputPlanner,
) -> None:
    headers = {
        "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
        "tracestate": "vendor=x",
        "baggage": "user=alice",
    }
    extra = {"max_tokens": 12, "temperature": 0.0, "top_p": 0.9}
    spans, starts = _run(planner, [(headers, extra)])
    assert len(spans) == 1
    span = spans[0]
    assert span.name == "llm_request"
    assert span.kind is SpanKind.SERVER
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "vllm.tracing.otel"
    assert span.resource.attributes["service.name"] == "vllm"
    # As a deployment's: the evaluator tells hosts (and their clocks) apart by host.name.
    assert span.resource.attributes["host.name"] == socket.gethostname()
    assert uuid.UUID(str(span.resource.attributes["service.instance.id"]))
    assert span.parent is not None
    assert span.parent.is_remote
    assert f"{span.parent.span_id:016x}" == PARENT_ID
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert span.context.trace_state.get("vendor") == "x"
    attrs = span.attributes or {}
    for name in LATENCIES:
        value = attrs[name]
        assert isinstance(value, float), name
        assert value >= 0, name
    assert attrs["gen_ai.usage.completion_tokens"] == 12
    assert isinstance(attrs["gen_ai.usage.prompt_tokens"], int)
    assert attrs["gen_ai.usage.prompt_tokens"] > 400
    assert str(attrs["gen_ai.request.id"]).startswith("chatcmpl-")
    assert attrs["gen_ai.request.max_tokens"] == 12
    assert attrs["gen_ai.request.top_p"] == 0.9
    assert "gen_ai.request.temperature" not in attrs  # vLLM drops a falsy temperature
    # Phases fit together as vLLM's do, and the span starts at arrival: time to first token
    # is the queue and the prefill after the API server's own work (the chat template, the
    # tokenizer), which is in no phase.
    assert attrs["gen_ai.latency.time_in_model_inference"] == pytest.approx(
        attrs["gen_ai.latency.time_in_model_prefill"] + attrs["gen_ai.latency.time_in_model_decode"]
    )
    ttft, queue, prefill, _ = _phases(span)
    assert 0 < ttft - queue - prefill < 0.1
    assert span.start_time is not None
    assert span.end_time is not None
    # Loose bounds: this is a shared machine, and only the order of events is the point.
    assert starts[0] <= span.start_time / 1e9 < starts[0] + 0.5
    e2e = attrs["gen_ai.latency.e2e"]
    assert isinstance(e2e, float)
    assert e2e - 0.001 <= (span.end_time - span.start_time) / 1e9 < e2e + 0.1


def test_without_traceparent_the_span_is_a_root_and_baggage_alone_is_ignored(
    planner: OutputPlanner,
) -> None:
    spans, _ = _run(planner, [({}, {"max_tokens": 3}), ({"baggage": "a=b"}, {"max_tokens": 3})])
    assert len(spans) == 2
    assert all(span.parent is None for span in spans)
    assert spans[0].context.trace_id != spans[1].context.trace_id


def test_sampling_attributes_are_the_ones_the_engine_ran_with(planner: OutputPlanner) -> None:
    """vLLM reads them off the effective SamplingParams: the output limit is always there,
    `max_completion_tokens` wins over `max_tokens`, and unset knobs show their defaults."""
    spans, _ = _run(
        planner,
        [
            ({}, {}),
            ({}, {"max_completion_tokens": 12, "max_tokens": 30, "temperature": 0.7, "n": 1}),
        ],
    )
    unset, capped = (span.attributes or {} for span in spans)
    room = 40960 - int(unset["gen_ai.usage.prompt_tokens"])
    assert unset["gen_ai.request.max_tokens"] == room
    assert unset["gen_ai.request.temperature"] == 1.0
    assert unset["gen_ai.request.top_p"] == 1.0
    assert unset["gen_ai.request.n"] == 1
    assert capped["gen_ai.request.max_tokens"] == 12
    assert capped["gen_ai.usage.completion_tokens"] == 12
    assert capped["gen_ai.request.temperature"] == 0.7
    assert capped["gen_ai.request.top_p"] == 1.0


def test_completions_span_carries_the_engine_request_id(planner: OutputPlanner) -> None:
    """vLLM submits each prompt of a completion as `<response id>-<index>`, and the span
    reports that id; the default output limit of a completion is 16."""
    engine = build_engine(preset("qwen3-8b-a100"), planner)

    async def run() -> str:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            response = await client.post("/v1/completions", json={"prompt": filler_text(50)})
            response.raise_for_status()
            return str(response.json()["id"])

    response_id = asyncio.run(run())
    (span,) = engine.spans.get_finished_spans()
    attrs = span.attributes or {}
    assert response_id.startswith("cmpl-")
    assert attrs["gen_ai.request.id"] == f"{response_id}-0"
    assert attrs["gen_ai.request.max_tokens"] == 16


class SlowTokenizer:
    """The real tokenizer behind an `encode` that takes `seconds` longer and notes when it
    began (wall clock): an API server busy with long prompts, or with other requests."""

    def __init__(self, inner: TokenCounter) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.started: list[float] = []

    def encode(self, text: str) -> list[int]:
        self.started.append(time.time())
        time.sleep(self.seconds)  # blocks the event loop, as a tokenizer's CPU work does
        return self.inner.encode(text)

    def decode(self, tokens: list[int]) -> str:
        return self.inner.decode(tokens)


@pytest.mark.parametrize("core", ["thread", "process"])
def test_span_starts_at_arrival_so_a_slow_frontend_shows_before_the_queue(
    tokenizer: TokenCounter, core: Literal["thread", "process"]
) -> None:
    """vLLM stamps `arrival_time` before its chat template and tokenizer run; its span
    starts there and TTFT counts from there, while the queue starts only when the core takes
    the request. So 50 ms of tokenizing are between the span's start and the queue."""
    slow = SlowTokenizer(tokenizer)
    planner = OutputPlanner(TokenCounter(slow), seed=7)
    slow.seconds = 0.05
    engine = build_engine(preset("qwen3-8b-a100"), planner, core=core)
    body = {"messages": [{"role": "user", "content": filler_text(200)}], "stream": True}

    async def run() -> tuple[float, float]:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            sent = time.time()
            result = await bench_style_stream(
                client, "/v1/chat/completions", body | {"max_tokens": 4}
            )
            return sent, result.ttft

    sent, client_ttft = asyncio.run(run())
    (span,) = engine.spans.get_finished_spans()
    ttft, queue, prefill, e2e = _phases(span)
    assert span.start_time is not None
    assert span.end_time is not None
    start = span.start_time / 1e9
    # The span starts once the request is in, and before the tokenizer began on it...
    assert sent <= start <= slow.started[-1]
    # ...so the tokenizer's time comes before the queue (vLLM's `vllm.frontend`), not in it.
    assert ttft - queue - prefill >= 0.05
    assert queue < 0.02
    # TTFT and e2e count from the span's start: its first token reached the client later.
    assert start + ttft <= sent + client_ttft + 0.002
    assert e2e <= (span.end_time - span.start_time) / 1e9 < e2e + 0.1
