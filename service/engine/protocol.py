"""OpenAI-compatible request and response bodies, shaped and serialised the way vLLM does.

The models follow vLLM's newest protocol modules that could be read
(`vllm/entrypoints/openai/chat_completion/protocol.py`, `.../completion/protocol.py`,
`vllm/entrypoints/serve/engine/protocol.py`, `vllm/entrypoints/generate/base/protocol.py`
on main in autumn 2026, after `system_fingerprint`, `prompt_text` and `metrics` arrived);
the 0.33.0 wheel itself was not available. Field order is theirs, because JSON key order
follows it. How each body is serialised follows the matching `serving.py`:

- stream chunks: `model_dump_json(exclude_unset=True)`, so a field appears (as `null` too)
  exactly when the serving code set it;
- the trailing usage chunk: `exclude_none=True`, so it has no nulls;
- whole responses: `JSONResponse(model.model_dump())`, every field, nulls included.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import ServiceError

__all__ = [
    "SSE_DONE",
    "VLLM_VERSION",
    "ChatChoice",
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
    "ErrorInfo",
    "ErrorResponse",
    "RequestParameterError",
    "StreamOptions",
    "TokenChunkEncoder",
    "UsageInfo",
    "model_card",
    "random_request_id",
    "sse_event",
    "system_fingerprint",
    "usage",
]

# The engine the emulator stands in for: the vllm/vllm-openai image docker-compose.yml runs.
VLLM_VERSION = "0.33.0"

SSE_DONE = b"data: [DONE]\n\n"

_MASK_64_BITS = (1 << 64) - 1


def random_request_id(prefix: str) -> str:
    """`chatcmpl-…` / `cmpl-…` with 16 hex digits, as vLLM's `random_uuid()` makes them
    (the low 64 bits of a uuid4, since vLLM 0.12)."""
    return f"{prefix}-{uuid.uuid4().int & _MASK_64_BITS:016x}"


def system_fingerprint(*, tensor_parallel_size: int, config_hash: str) -> str:
    """vLLM's default (`--fingerprint-mode full`) `system_fingerprint`:
    `vllm-<version>[-tp<N>]-<first 8 hex digits of the config hash>`."""
    parts = [f"vllm-{VLLM_VERSION}"]
    if tensor_parallel_size > 1:
        parts.append(f"tp{tensor_parallel_size}")
    parts.append(config_hash[:8])
    return "-".join(parts)


def sse_event(chunk: BaseModel, *, exclude_unset: bool = True, exclude_none: bool = False) -> bytes:
    body = chunk.model_dump_json(exclude_unset=exclude_unset, exclude_none=exclude_none)
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
class RequestParameterError(ServiceError, ValueError):
    """A request that parses but is not allowed; `parameter` names the field to change.

    Raised inside request validation, so it reaches the client as a 400 with `param` set,
    as vLLM's `VLLMValidationError` does.
    """

    def __init__(self, message: str, *, parameter: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class StreamOptions(BaseModel):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class _Request(BaseModel):
    # Unknown OpenAI parameters are accepted and ignored, as vLLM does (it only logs them).
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = 1
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _stream_options_need_stream(cls, data: Any) -> Any:
        # vLLM's `validate_stream_options`; an empty `{}` passes, as there.
        if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
            raise RequestParameterError(
                "Stream options can only be defined when `stream=True`.",
                parameter="stream_options",
            )
        return data


class ChatCompletionRequest(_Request):
    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = Field(default=None, ge=1)

    @property
    def token_limit(self) -> int | None:
        """The client's cap on output tokens; vLLM prefers `max_completion_tokens`."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens
        return self.max_tokens


_COMPLETION_MAX_TOKENS = 16  # the OpenAI completions default, which vLLM keeps


class CompletionRequest(_Request):
    prompt: str | list[str] | list[int]
    max_tokens: int | None = Field(default=_COMPLETION_MAX_TOKENS, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _null_max_tokens_means_default(cls, data: Any) -> Any:
        # vLLM's `normalize_null_max_tokens`: an explicit null is the default 16, not "no cap".
        if isinstance(data, dict) and "max_tokens" in data and data["max_tokens"] is None:
            return {**data, "max_tokens": _COMPLETION_MAX_TOKENS}
        return data


# -- responses --------------------------------------------------------------------------
class UsageInfo(BaseModel):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: dict[str, Any] | None = None
    completion_tokens_details: dict[str, Any] | None = None


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(BaseModel):
    error: ErrorInfo


class DeltaMessage(BaseModel):
    # vLLM's DeltaMessage also has `tool_calls`, dropped from the JSON when empty; the
    # emulator never calls tools, so it is left out here.
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None


class ChatStreamChoice(BaseModel):
    index: int
    delta: DeltaMessage
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class ChatCompletionStreamResponse(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatStreamChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None
    prompt_token_ids: list[int] | None = None
    prompt_text: str | None = None
    metrics: dict[str, Any] | None = None


class ChatMessage(BaseModel):
    # As `DeltaMessage`: vLLM drops an empty `tool_calls` list from the JSON.
    role: str
    content: str | None = None
    refusal: str | None = None
    annotations: Any = None
    audio: Any = None
    function_call: Any = None
    reasoning: str | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    logprobs: Any = None
    finish_reason: str | None = "stop"
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    routed_experts: str | None = None


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
    prompt_token_ids: list[int] | None = None
    prompt_text: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None


class CompletionStreamChoice(BaseModel):
    index: int
    text: str
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None


class CompletionStreamResponse(BaseModel):
    id: str
    object: str = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionStreamChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None
    metrics: dict[str, Any] | None = None


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    prompt_logprobs: Any = None
    prompt_token_ids: list[int] | None = None
    routed_experts: str | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    service_tier: str | None = None
    system_fingerprint: str | None = None
    usage: UsageInfo
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None


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
