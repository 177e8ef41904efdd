"""Wire compatibility: real OpenAI client, a benchmark-style SSE parser, vLLM's stream shape."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from spanbudget.service.engine.generation import OutputPlanner, render_chat_prompt
from spanbudget.service.engine.protocol import (
    ChatCompletionStreamResponse,
    ChatStreamChoice,
    DeltaMessage,
    TokenChunkEncoder,
    sse_event,
)
from spanbudget.service.tokens import TokenCounter

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


def test_keys_of_older_vllm_recordings_still_lead_ours_in_order(
    planner: OutputPlanner, shared_fixtures: Path
) -> None:
    """The recorded streams predate current vLLM, so they cannot pin today's chunks (the
    golden tests below do). What they still prove: the fields vLLM has sent since 0.6 come
    first and in the same order, later additions only follow them, and OpenAI's own usage
    chunk reads like ours."""
    engine = _engine(planner)
    body = {"messages": MESSAGES, "stream": True, "max_tokens": 3}
    with_usage = body | {"stream_options": {"include_usage": True}}

    async def run() -> tuple[str, str]:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            response = await client.post("/v1/chat/completions", json=body)
            assert response.headers["content-type"].startswith("text/event-stream")
            usage_response = await client.post("/v1/chat/completions", json=with_usage)
            return response.text, usage_response.text

    raw, raw_with_usage = asyncio.run(run())
    ours = _data_lines(raw)
    assert ours[-1] == "[DONE]"
    chunks = [json.loads(line) for line in ours[:-1]]
    # NIM serving vLLM <= 0.6 (2024): `role`/`content` nulls in deltas, no usage chunk.
    nim_raw = (
        shared_fixtures / "sse" / "nim_vllm_format_mixtral_chat_stream_dynamo.txt"
    ).read_text()
    assert _data_lines(nim_raw)[-1] == "[DONE]"
    nim = [json.loads(line) for line in _data_lines(nim_raw) if line != "[DONE]"]
    # Role chunk, first token, finishing chunk.
    for mine, theirs in ((chunks[0], nim[0]), (chunks[1], nim[1]), (chunks[-1], nim[-1])):
        assert list(mine)[: len(theirs)] == list(theirs)
        mine_choice, their_choice = mine["choices"][0], theirs["choices"][0]
        assert list(mine_choice)[: len(their_choice)] == list(their_choice)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    # OpenAI's recording (include_usage) parses with the same reader and agrees on usage.
    openai_raw = (shared_fixtures / "sse" / "openai_gpt4_chat_stream_include_usage.txt").read_text()
    recorded = [json.loads(line) for line in _data_lines(openai_raw) if line != "[DONE]"]
    usage_chunk = json.loads(_data_lines(raw_with_usage)[-2])
    assert recorded[-1]["choices"] == usage_chunk["choices"] == []
    assert set(recorded[-1]["usage"]) >= set(usage_chunk["usage"])


# -- golden wire lines ------------------------------------------------------------------
# Each JSON line exactly as current vLLM writes it (see service/engine/protocol.py
# for the sources), after `normalise`: ids, `created`, the fingerprint's config hash and non-empty
# token text are placeholders; P, T and C stand for the usage counts.
MODEL = "Qwen/Qwen3-8B"
_HEAD = '{"id":"%s-ID","object":"%s","created":0,"model":"' + MODEL + '",'
CHAT_HEAD = _HEAD % ("chatcmpl", "chat.completion.chunk")
CMPL_HEAD = _HEAD % ("cmpl", "text_completion")
FINGERPRINT = '"system_fingerprint":"vllm-0.33.0-HASH"'
STREAM_USAGE = '"usage":{"prompt_tokens":P,"total_tokens":T,"completion_tokens":C}'
WHOLE_USAGE = (
    '"usage":{"prompt_tokens":P,"total_tokens":T,"completion_tokens":C,'
    '"prompt_tokens_details":null,"completion_tokens_details":null}'
)

CHAT_ROLE = (
    CHAT_HEAD + '"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
    '"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}'
)
CHAT_TOKEN = (
    CHAT_HEAD + '"choices":[{"index":0,"delta":{"content":"TOKEN"},"logprobs":null,'
    '"finish_reason":null,"token_ids":null}]}'
)
CHAT_LAST_LENGTH = (
    CHAT_HEAD + '"choices":[{"index":0,"delta":{"content":"TOKEN"},"logprobs":null,'
    '"finish_reason":"length","stop_reason":null,"token_ids":null}]}'
)
CHAT_LAST_STOP_FINGERPRINT = (
    CHAT_HEAD + '"choices":[{"index":0,"delta":{"content":""},"logprobs":null,'
    '"finish_reason":"stop","stop_reason":null,"token_ids":null}],' + FINGERPRINT + "}"
)
CHAT_USAGE = CHAT_HEAD + '"choices":[],' + STREAM_USAGE + "," + FINGERPRINT + "}"
CMPL_TOKEN = (
    CMPL_HEAD + '"choices":[{"index":0,"text":"TOKEN","logprobs":null,"finish_reason":null,'
    '"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}'
)
CMPL_LAST_LENGTH = (
    CMPL_HEAD + '"choices":[{"index":0,"text":"TOKEN","logprobs":null,"finish_reason":"length",'
    '"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}'
)
CMPL_LAST_STOP_FINGERPRINT = (
    CMPL_HEAD + '"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop",'
    '"stop_reason":null,"prompt_token_ids":null,"token_ids":null}],' + FINGERPRINT + "}"
)
CMPL_USAGE = CMPL_HEAD + '"choices":[],' + STREAM_USAGE + "," + FINGERPRINT + "}"
CHAT_WHOLE = (
    (_HEAD % ("chatcmpl", "chat.completion"))
    + '"choices":[{"index":0,"message":{"role":"assistant","content":"TOKEN","refusal":null,'
    '"annotations":null,"audio":null,"function_call":null,"reasoning":null},'
    '"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null,'
    '"routed_experts":null}],"service_tier":null,'
    + FINGERPRINT
    + ","
    + WHOLE_USAGE
    + ',"prompt_logprobs":null,"prompt_token_ids":null,"prompt_text":null,'
    '"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}'
)
CMPL_WHOLE = (
    (_HEAD % ("cmpl", "text_completion"))
    + '"choices":[{"index":0,"text":"TOKEN","logprobs":null,"finish_reason":"stop",'
    '"stop_reason":null,"token_ids":null,"prompt_logprobs":null,"prompt_token_ids":null,'
    '"routed_experts":null}],"service_tier":null,'
    + FINGERPRINT
    + ","
    + WHOLE_USAGE
    + ',"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}'
)

_ID = re.compile(r'"id":"(chatcmpl|cmpl)-[0-9a-f]{16}"')
_CREATED = re.compile(r'"created":\d+,')
_FINGERPRINT_HASH = re.compile(r'"system_fingerprint":"vllm-0\.33\.0-[0-9a-f]{8}"')
_TEXT = re.compile(r'"(content|text)":"(?:[^"\\]|\\.)+"')


def normalise(line: str) -> str:
    line = _ID.sub(r'"id":"\1-ID"', line)
    line = _CREATED.sub('"created":0,', line)
    line = _FINGERPRINT_HASH.sub(FINGERPRINT, line)
    return _TEXT.sub(r'"\1":"TOKEN"', line)


@pytest.fixture(scope="module")
def short_planner(tokenizer: TokenCounter) -> OutputPlanner:
    """Answers of exactly three tokens: two of text, then end-of-sequence."""
    return OutputPlanner(tokenizer, seed=7, min_tokens=3, max_tokens=3)


CHAT_PROMPT = render_chat_prompt(MESSAGES)
CMPL_PROMPT = "The scheduler"


@pytest.mark.parametrize(
    ("path", "body", "prompt", "expected"),
    [
        (
            "/v1/chat/completions",
            {"max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}},
            CHAT_PROMPT,
            [CHAT_ROLE, CHAT_TOKEN, CHAT_LAST_LENGTH, CHAT_USAGE],
        ),
        (
            "/v1/chat/completions",
            {"stream": True},
            CHAT_PROMPT,
            [CHAT_ROLE, CHAT_TOKEN, CHAT_TOKEN, CHAT_LAST_STOP_FINGERPRINT],
        ),
        (
            "/v1/completions",
            {"max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}},
            CMPL_PROMPT,
            [CMPL_TOKEN, CMPL_LAST_LENGTH, CMPL_USAGE],
        ),
        (
            "/v1/completions",
            {"stream": True, "stream_options": {}},
            CMPL_PROMPT,
            [CMPL_TOKEN, CMPL_TOKEN, CMPL_LAST_STOP_FINGERPRINT],
        ),
    ],
    ids=["chat-usage-length", "chat-stop", "completions-usage-length", "completions-stop"],
)
def test_stream_chunks_are_vllms_to_the_byte(
    short_planner: OutputPlanner,
    path: str,
    body: dict[str, Any],
    prompt: str,
    expected: list[str],
) -> None:
    engine = _engine(short_planner)
    payload = body | ({"messages": MESSAGES} if "chat" in path else {"prompt": CMPL_PROMPT})
    raw = _post(engine, path, payload)
    events = raw.split("\n\n")
    # Every event is one `data:` line, and the stream ends with `[DONE]`.
    assert events[-2:] == ["data: [DONE]", ""]
    assert all(event.startswith("data: ") and "\n" not in event for event in events[:-1])
    prompt_tokens = short_planner.count_prompt(prompt)
    completion_tokens = expected.count(CHAT_TOKEN) + expected.count(CMPL_TOKEN) + 1
    assert [normalise(e.removeprefix("data: ")) for e in events[:-2]] == [
        _counts(line, prompt_tokens, completion_tokens) for line in expected
    ]
    # One id for the whole stream.
    assert len({match[0] for e in events[:-2] if (match := _ID.search(e))}) == 1


@pytest.mark.parametrize(
    ("path", "body", "prompt", "expected", "completion_tokens"),
    [
        (
            "/v1/chat/completions",
            {"messages": MESSAGES, "max_tokens": 2},
            CHAT_PROMPT,
            CHAT_WHOLE,
            2,
        ),
        ("/v1/completions", {"prompt": CMPL_PROMPT}, CMPL_PROMPT, CMPL_WHOLE, 3),
    ],
    ids=["chat", "completions"],
)
def test_whole_responses_are_vllms_to_the_byte(
    short_planner: OutputPlanner,
    path: str,
    body: dict[str, Any],
    prompt: str,
    expected: str,
    completion_tokens: int,
) -> None:
    engine = _engine(short_planner)
    raw = _post(engine, path, body)
    prompt_tokens = short_planner.count_prompt(prompt)
    assert normalise(raw) == _counts(expected, prompt_tokens, completion_tokens)


def _counts(line: str, prompt_tokens: int, completion_tokens: int) -> str:
    return (
        line.replace('"prompt_tokens":P', f'"prompt_tokens":{prompt_tokens}')
        .replace('"total_tokens":T', f'"total_tokens":{prompt_tokens + completion_tokens}')
        .replace('"completion_tokens":C', f'"completion_tokens":{completion_tokens}')
    )


def _post(engine: Any, path: str, body: dict[str, Any]) -> str:
    async def run() -> str:
        transport = httpx.ASGITransport(app=engine.app)
        async with (
            engine.runtime.running(),
            httpx.AsyncClient(transport=transport, base_url="http://engine") as client,
        ):
            response = await client.post(path, json=body)
            assert response.status_code == 200, response.text
            return response.text

    return asyncio.run(run())


def test_system_fingerprint_names_version_parallelism_and_config(planner: OutputPlanner) -> None:
    def fingerprint(engine: Any) -> str:
        body = {"prompt": "x", "max_tokens": 1}
        return str(json.loads(_post(engine, "/v1/completions", body))["system_fingerprint"])

    single = fingerprint(_engine(planner))
    assert re.fullmatch(r"vllm-0\.33\.0-[0-9a-f]{8}", single)
    four_way = build_engine(preset("qwen2.5-72b-fp8-4xh100", step_overhead_ms=0.2), planner)
    assert re.fullmatch(r"vllm-0\.33\.0-tp4-[0-9a-f]{8}", fingerprint(four_way))
    # Like vLLM's config hash, it moves when the deployment does, and only then.
    assert fingerprint(_engine(planner)) == single
    slower = build_engine(preset("qwen3-8b-h100", step_overhead_ms=0.3), planner)
    assert fingerprint(slower) != single


def test_completions_null_max_tokens_means_sixteen(planner: OutputPlanner) -> None:
    raw = _post(_engine(planner), "/v1/completions", {"prompt": "x", "max_tokens": None})
    assert json.loads(raw)["usage"]["completion_tokens"] == 16


def test_stream_options_without_include_usage_send_no_usage_chunk(planner: OutputPlanner) -> None:
    body = {"messages": MESSAGES, "max_tokens": 2, "stream": True, "stream_options": {}}
    lines = _data_lines(_post(_engine(planner), "/v1/chat/completions", body))
    assert lines[-1] == "[DONE]"
    assert all(json.loads(line)["choices"] for line in lines[:-1])
    assert "system_fingerprint" in json.loads(lines[-2])


@pytest.mark.parametrize(
    ("path", "body", "status", "error_type", "param"),
    [
        (
            "/v1/chat/completions",
            {"model": "gpt-5", "messages": MESSAGES},
            404,
            "NotFoundError",
            None,
        ),
        ("/v1/chat/completions", {"messages": MESSAGES, "n": 2}, 400, "BadRequestError", "n"),
        (
            "/v1/chat/completions",
            {"messages": MESSAGES, "max_tokens": 50_000},
            400,
            "BadRequestError",
            None,
        ),
        ("/v1/chat/completions", {"messages": "not a list"}, 400, "Bad Request", "body.messages"),
        (
            "/v1/chat/completions",
            {"messages": MESSAGES, "stream_options": {"include_usage": True}},
            400,
            "Bad Request",
            "stream_options",
        ),
        (
            "/v1/chat/completions",
            {"messages": MESSAGES, "stream": False, "stream_options": {"include_usage": False}},
            400,
            "Bad Request",
            "stream_options",
        ),
        (
            "/v1/completions",
            {"prompt": "x", "stream_options": {"include_usage": True}},
            400,
            "Bad Request",
            "stream_options",
        ),
    ],
    ids=[
        "unknown-model",
        "n",
        "too-long",
        "invalid",
        "stream-options-without-stream",
        "stream-options-with-stream-false",
        "completions-stream-options-without-stream",
    ],
)
def test_errors_are_vllm_error_responses(
    planner: OutputPlanner,
    path: str,
    body: dict[str, Any],
    status: int,
    error_type: str,
    param: str | None,
) -> None:
    engine = _engine(planner)

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=engine.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
            return await client.post(path, json=body)

    response = asyncio.run(run())
    assert response.status_code == status
    assert list(response.json()) == ["error"]
    error = response.json()["error"]
    assert list(error) == ["message", "type", "param", "code"]
    assert error["type"] == error_type
    assert error["code"] == status
    assert error["param"] == param
    assert error["message"]
    if param == "stream_options":
        assert "Stream options can only be defined when `stream=True`." in error["message"]


def test_empty_stream_options_without_stream_are_accepted(planner: OutputPlanner) -> None:
    """vLLM rejects only truthy `stream_options`, so `{}` and null still pass."""
    engine = _engine(planner)
    for options in ({}, None):
        body = {"messages": MESSAGES, "max_tokens": 2, "stream_options": options}
        assert json.loads(_post(engine, "/v1/chat/completions", body))["usage"]


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
            token_ids=None,
            finish_reason="length" if done else None,
            **({"stop_reason": None} if done else {}),
        )
        return ChatCompletionStreamResponse(
            id="chatcmpl-1",
            object="chat.completion.chunk",
            created=1,
            model='m"1',
            choices=[choice],
            **({"system_fingerprint": "vllm-0.33.0-0123abcd"} if done else {}),
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
