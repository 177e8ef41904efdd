"""Wire compatibility: real OpenAI client, a benchmark-style SSE parser, vLLM's stream shape."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from service.engine.generation import OutputPlanner
from service.engine.protocol import (
    ChatCompletionStreamResponse,
    ChatStreamChoice,
    DeltaMessage,
    TokenChunkEncoder,
    sse_event,
)
from service.tokens import TokenCounter

from .harness import StreamResult, bench_style_stream, build_engine, preset, serve

MESSAGES: list[Any] = [
    {"role": "system", "content": "Answer from the documents."},
    {"role": "user", "content": "How does the scheduler batch requests?"},
]


def _engine(planner: OutputPlanner) -> Any:
    return build_engine(preset("qwen3-8b-h100", step_overhead_ms=0.2), planner)


def test_openai_client_streaming_and_not(planner: OutputPlanner, tokenizer: TokenCounter) -> None:
    engine = _engine(planner)

    async def run() -> tuple[Any, list[Any], Any, list[Any]]:
        async with serve(engine.app) as url:
            client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            async with client:
                whole = await client.chat.completions.create(
                    model="Qwen/Qwen3-8B",
                    messages=MESSAGES,
                    seed=5,
                )
                stream = await client.chat.completions.create(
                    model="Qwen/Qwen3-8B",
                    messages=MESSAGES,
                    seed=5,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                chunks = [chunk async for chunk in stream]
                completion = await client.completions.create(
                    model="Qwen/Qwen3-8B", prompt="The scheduler", max_tokens=7
                )
                models = [m async for m in client.models.list()]
                return whole, chunks, completion, models

    whole, chunks, completion, models = asyncio.run(run())
    assert whole.object == "chat.completion"
    assert whole.id.startswith("chatcmpl-")
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason == "stop"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # Same seed and prompt: the stream spells out the non-streamed answer token by token.
    assert text == whole.choices[0].message.content
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.role is None]
    assert whole.usage is not None
    assert chunks[-1].usage is not None
    assert (
        len(content_chunks) == whole.usage.completion_tokens == chunks[-1].usage.completion_tokens
    )
    rendered = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in MESSAGES)
    assert whole.usage.prompt_tokens == tokenizer.count(rendered + "<|im_start|>assistant\n")
    assert chunks[0].choices[0].delta.role == "assistant"
    assert completion.object == "text_completion"
    assert completion.id.startswith("cmpl-")
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 7
    assert completion.choices[0].finish_reason == "length"
    assert [m.id for m in models] == ["Qwen/Qwen3-8B"]


def test_benchmark_style_client_parses_chat_and_completions(planner: OutputPlanner) -> None:
    engine = _engine(planner)
    chat = {"messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True}}
    completion = {"prompt": "The scheduler", "stream": True, "max_tokens": 9}

    async def run() -> tuple[StreamResult, StreamResult]:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            return (
                await bench_style_stream(client, "/v1/chat/completions", chat),
                await bench_style_stream(client, "/v1/completions", completion),
            )

    chat_result, completion_result = asyncio.run(run())
    assert chat_result.done
    assert chat_result.usage is not None
    assert chat_result.deltas == chat_result.usage["completion_tokens"]
    assert chat_result.finish_reason == "stop"
    assert chat_result.ttft > 0
    assert list(chat_result.usage) == ["prompt_tokens", "total_tokens", "completion_tokens"]
    # No stream_options: no usage chunk, as in vLLM.
    assert completion_result.done
    assert completion_result.usage is None
    assert completion_result.deltas == 9
    assert completion_result.finish_reason == "length"


def _data_lines(raw: str) -> list[str]:
    return [line.removeprefix("data: ") for line in raw.splitlines() if line.startswith("data: ")]


def test_stream_has_vllm_chunk_shape(planner: OutputPlanner, shared_fixtures: Path) -> None:
    engine = _engine(planner)
    body = {
        "messages": MESSAGES,
        "stream": True,
        "max_tokens": 3,
        "stream_options": {"include_usage": True},
    }

    async def run() -> str:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            response = await client.post("/v1/chat/completions", json=body)
            assert response.headers["content-type"].startswith("text/event-stream")
            return response.text

    raw = asyncio.run(run())
    ours = _data_lines(raw)
    assert raw.endswith("data: [DONE]\n\n")
    assert ours[-1] == "[DONE]"
    chunks = [json.loads(line) for line in ours[:-1]]
    # A vLLM-format stream recorded from a real server (NIM, vLLM <= 0.6).
    nim_raw = (
        shared_fixtures / "sse" / "nim_vllm_format_mixtral_chat_stream_dynamo.txt"
    ).read_text()
    nim = [json.loads(line) for line in _data_lines(nim_raw) if line != "[DONE]"]
    assert _data_lines(nim_raw)[-1] == "[DONE]"
    for mine, theirs in ((chunks[0], nim[0]), (chunks[1], nim[1]), (chunks[-2], nim[-1])):
        assert list(mine) == list(theirs)  # id, object, created, model, choices — in order
        assert list(mine["choices"][0]) == list(theirs["choices"][0])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert list(chunks[1]["choices"][0]["delta"]) == ["content"]  # unset role is left out
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-2]["choices"][0]["stop_reason"] is None
    # The usage chunk: no choices, vLLM's key order, no nulls.
    assert chunks[-1]["choices"] == []
    assert list(chunks[-1]) == ["id", "object", "created", "model", "choices", "usage"]
    assert list(chunks[-1]["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens"]
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["id"].startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    # OpenAI's own recording parses with the same reader: the shapes agree where it matters.
    openai_raw = (shared_fixtures / "sse" / "openai_gpt4_chat_stream_include_usage.txt").read_text()
    recorded = [json.loads(line) for line in _data_lines(openai_raw) if line != "[DONE]"]
    assert recorded[-1]["choices"] == []
    assert set(recorded[-1]["usage"]) >= set(chunks[-1]["usage"])


@pytest.mark.parametrize(
    ("body", "status", "error_type"),
    [
        ({"model": "gpt-5", "messages": MESSAGES}, 404, "NotFoundError"),
        ({"messages": MESSAGES, "n": 2}, 400, "BadRequestError"),
        ({"messages": MESSAGES, "max_tokens": 50_000}, 400, "BadRequestError"),
        ({"messages": "not a list"}, 400, "BadRequestError"),
    ],
    ids=["unknown-model", "n", "too-long", "invalid"],
)
def test_errors_are_vllm_error_responses(
    planner: OutputPlanner, body: dict[str, Any], status: int, error_type: str
) -> None:
    engine = _engine(planner)

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=engine.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
            return await client.post("/v1/chat/completions", json=body)

    response = asyncio.run(run())
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == error_type
    assert error["code"] == status
    assert error["message"]


def test_health_and_models(planner: OutputPlanner) -> None:
    engine = _engine(planner)

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=engine.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
            return [await client.get(path) for path in ("/health", "/healthz", "/v1/models")]

    health, healthz, models = asyncio.run(run())
    assert health.status_code == 200
    assert healthz.json() == {"status": "ok"}
    card = models.json()["data"][0]
    assert card["id"] == "Qwen/Qwen3-8B"
    assert card["owned_by"] == "vllm"
    assert card["max_model_len"] == 40960


def test_token_chunk_encoder_writes_the_same_bytes_as_pydantic(planner: OutputPlanner) -> None:
    def chunk(text: str, done: bool) -> ChatCompletionStreamResponse:
        choice = ChatStreamChoice(
            index=0,
            delta=DeltaMessage(content=text),
            logprobs=None,
            finish_reason="length" if done else None,
            **({"stop_reason": None} if done else {}),
        )
        return ChatCompletionStreamResponse(
            id="chatcmpl-1",
            object="chat.completion.chunk",
            created=1,
            model='m"1',
            choices=[choice],
        )

    encoder = TokenChunkEncoder(chunk)
    tricky = [
        '"quoted"',
        "back\\slash",
        "new\nline\ttab",
        "\x00\x1f\x7f",
        "é ü 中文 🙂",
        "</script>",
        "",
    ]
    pieces = [*tricky, *planner.plan("any prompt", max_tokens=None).pieces]
    for text in pieces:
        for done in (False, True):
            assert encoder.encode(text, done) == sse_event(chunk(text, done)), text
