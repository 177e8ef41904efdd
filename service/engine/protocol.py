"""OpenAI-compatible request and response bodies, shaped and serialised the way vLLM does.

Stream chunks go out as `model_dump_json(exclude_unset=True, exclude_none=not chunk.choices)`:
fields a chunk sets explicitly appear (as null too), and the usage chunk has no nulls.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "SSE_DONE",
    "ChatCompletionRequest",
    "ChatCompletionResponse",
    "ChatCompletionStreamResponse",
    "ChatMessage",
    "ChatStreamChoice",
    "CompletionChoice",
    "CompletionRequest",
    "CompletionResponse",
    "CompletionStreamChoice",
    "CompletionStreamResponse",
    "DeltaMessage",
    "ErrorResponse",
    "TokenChunkEncoder",
    "UsageInfo",
    "model_card",
    "random_request_id",
    "sse_event",
    "usage",
]

SSE_DONE = b"data: [DONE]\n\n"


def random_request_id(prefix: str) -> str:
    """`chatcmpl-…` / `cmpl-…` with a uuid4 hex, as vLLM's `random_uuid()` makes them."""
    return f"{prefix}-{uuid.uuid4().hex}"


def sse_event(chunk: BaseModel) -> bytes:
    choices = getattr(chunk, "choices", None)
    body = chunk.model_dump_json(exclude_unset=True, exclude_none=not choices)
    return b"data: " + body.encode() + b"\n\n"


class TokenChunkEncoder:
    """`sse_event` for one request's token chunks, without building a model per token.

    The frame around the text is cut once from `sse_event` itself, so the bytes stay the
    same; only the text is encoded per token (JSON string escaping, as pydantic does).
    """

    _MARKER = "\u2063token\u2063"

    def __init__(self, make_chunk: Callable[[str, bool], BaseModel]) -> None:
        marker = json.dumps(self._MARKER, ensure_ascii=False).encode()
        self._frames = {
            finished: tuple(sse_event(make_chunk(self._MARKER, finished)).split(marker))
            for finished in (False, True)
        }
        if any(len(frame) != 2 for frame in self._frames.values()):
            raise ValueError("the chunk must carry the text exactly once")

    def encode(self, text: str, finished: bool) -> bytes:
        head, tail = self._frames[finished]
        return head + json.dumps(text, ensure_ascii=False).encode() + tail


# -- requests ---------------------------------------------------------------------------
class StreamOptions(BaseModel):
    include_usage: bool | None = True
    continuous_usage_stats: bool | None = False


class _Request(BaseModel):
    # Unknown OpenAI parameters are accepted and ignored, as vLLM does (it only warns).
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = 1
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None


class ChatCompletionRequest(_Request):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = Field(default=None, ge=1)

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Request):
    prompt: str | list[str] | list[int]
    max_tokens: int | None = Field(default=16, ge=1)  # the OpenAI completions default


# -- responses --------------------------------------------------------------------------
class UsageInfo(BaseModel):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: dict[str, int] | None = None


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(BaseModel):
    error: ErrorInfo


class DeltaMessage(BaseModel):
    role: str | None = None
    content: str | None = None


class ChatStreamChoice(BaseModel):
    index: int
    delta: DeltaMessage
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionStreamResponse(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatStreamChoice]
    usage: UsageInfo | None = None


class ChatMessage(BaseModel):
    role: str
    content: str | None = None
    refusal: str | None = None
    annotations: Any = None
    audio: Any = None
    function_call: Any = None
    tool_calls: list[Any] = Field(default_factory=list)
    reasoning_content: str | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    logprobs: Any = None
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    service_tier: str | None = None
    system_fingerprint: str | None = None
    usage: UsageInfo
    prompt_logprobs: Any = None
    kv_transfer_params: Any = None


class CompletionStreamChoice(BaseModel):
    index: int
    text: str
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class CompletionStreamResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionStreamChoice]
    usage: UsageInfo | None = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs: Any = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    service_tier: str | None = None
    system_fingerprint: str | None = None
    usage: UsageInfo
    kv_transfer_params: Any = None


def usage(prompt_tokens: int, completion_tokens: int) -> UsageInfo:
    return UsageInfo(
        prompt_tokens=prompt_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        completion_tokens=completion_tokens,
    )


def model_card(model: str, max_model_len: int, created: int) -> dict[str, Any]:
    """One `/v1/models` entry, with the fields vLLM's `ModelCard` has."""
    return {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [
            {
                "id": random_request_id("modelperm"),
                "object": "model_permission",
                "created": created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }
