"""The OpenAI endpoints: `/v1/chat/completions` and `/v1/completions`, one handler object
each, over the shared steps of every request (check it, plan its output, submit it).

Which fields each chunk carries, and when, follows vLLM's serving code (see protocol.py):
one token per streamed delta, the usage chunk when asked for, then `data: [DONE]`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from .api_errors import ApiError
from .engine_loop import EngineDead
from .faults import DELAY_HEADER, engine_delays
from .generation import render_chat_prompt
from .protocol import (
    ChatChoice,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionStreamResponse,
    ChatMessage,
    ChatStreamChoice,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    CompletionStreamChoice,
    CompletionStreamResponse,
    DeltaMessage,
    UsageInfo,
    random_request_id,
    sse_event,
    usage,
)
from .runtime import (
    ArrivalTime,
    EngineRuntime,
    PreparedRequest,
    PromptTooLong,
    RequestStream,
)
from .streaming import collect_tokens, stream_tokens
from .tracing import RequestSpanInfo, trace_headers

__all__ = ["ChatCompletions", "Completions", "completions_router"]

# What vLLM samples with when a request leaves these unset (`_DEFAULT_SAMPLING_PARAMS` in
# its chat and completion protocol modules). A real server started with the default
# `--generation-config auto` takes the model's generation_config.json first instead.
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0


def completions_router(runtime: EngineRuntime, fingerprint: str) -> APIRouter:
    router = APIRouter()
    chat = ChatCompletions(runtime, fingerprint)
    router.add_api_route(
        "/v1/chat/completions",
        chat.create,
        methods=["POST"],
        name="chat_completions",
        response_model=None,
    )
    text = Completions(runtime, fingerprint)
    router.add_api_route(
        "/v1/completions", text.create, methods=["POST"], name="completions", response_model=None
    )
    return router


@dataclass(frozen=True)
class _Reply:
    """What every chunk and body of one response shares."""

    prepared: PreparedRequest
    model: str
    fingerprint: str
    include_usage: bool
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def id(self) -> str:
        return self.prepared.request_id

    @property
    def finish_reason(self) -> str:
        return self.prepared.plan.finish_reason

    def usage(self) -> UsageInfo:
        return usage(self.prepared.prompt_tokens, self.prepared.plan.num_tokens)

    def header(self) -> dict[str, Any]:
        """The fields every body and chunk of the response starts with."""
        return {"id": self.id, "created": self.created, "model": self.model}

    def whole(self, make: Callable[..., BaseModel], choice: BaseModel) -> JSONResponse:
        """The answer to a request that did not ask for a stream."""
        body = make(
            **self.header(),
            choices=[choice],
            usage=self.usage(),
            system_fingerprint=self.fingerprint,
        )
        return JSONResponse(body.model_dump())

    def closing_fields(self, done: bool) -> dict[str, Any]:
        """vLLM stamps the fingerprint on the finishing chunk when no usage chunk follows."""
        return {"system_fingerprint": self.fingerprint} if done and not self.include_usage else {}


class _Endpoint:
    def __init__(self, runtime: EngineRuntime, fingerprint: str) -> None:
        self.runtime = runtime
        self.fingerprint = fingerprint

    def _reply(
        self, prepared: PreparedRequest, body: ChatCompletionRequest | CompletionRequest
    ) -> _Reply:
        # vLLM's `should_include_usage` without `--enable-force-include-usage`.
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return _Reply(prepared, self.runtime.model_name, self.fingerprint, include_usage)


class ChatCompletions(_Endpoint):
    """`POST /v1/chat/completions`: the chat template applied, then one request."""

    async def create(self, body: ChatCompletionRequest, raw: Request) -> Response:
        # Before the chat template and the tokenizer, as vLLM stamps it: a busy API server
        # shows as the time between the span's start and the queue.
        arrival = ArrivalTime.now()
        prompt = render_chat_prompt(body.messages, self.runtime.preset.chat_template)
        prepared = prepare(
            self.runtime, raw, body, "chatcmpl", prompt, body.token_limit, arrival=arrival
        )
        stream = submit(self.runtime, prepared)
        reply = self._reply(prepared, body)
        if body.stream:
            final = sse_event(self._usage_chunk(reply), exclude_none=True)
            return stream_tokens(
                stream,
                partial(self._chunk, reply),
                first=sse_event(self._role_chunk(reply)),
                final=final if reply.include_usage else None,
            )
        await collect_tokens(stream)
        message = ChatMessage(role="assistant", content=prepared.plan.text, reasoning=None)
        choice = ChatChoice(
            index=0, message=message, finish_reason=reply.finish_reason, stop_reason=None
        )
        return reply.whole(ChatCompletionResponse, choice)

    @staticmethod
    def _chunk(reply: _Reply, text: str, done: bool) -> BaseModel:
        # vLLM's chat stream generator sets `stop_reason` on the finishing choice only.
        finish: dict[str, Any] = {"finish_reason": None}
        if done:
            finish = {"finish_reason": reply.finish_reason, "stop_reason": None}
        choice = ChatStreamChoice(
            index=0, delta=DeltaMessage(content=text), logprobs=None, token_ids=None, **finish
        )
        return ChatCompletionStreamResponse(
            **reply.header(),
            object="chat.completion.chunk",
            choices=[choice],
            **reply.closing_fields(done),
        )

    @staticmethod
    def _role_chunk(reply: _Reply) -> BaseModel:
        role = DeltaMessage(role="assistant", content="")
        return ChatCompletionStreamResponse(
            **reply.header(),
            object="chat.completion.chunk",
            choices=[ChatStreamChoice(index=0, delta=role, logprobs=None, finish_reason=None)],
            prompt_token_ids=None,
            prompt_text=None,
        )

    @staticmethod
    def _usage_chunk(reply: _Reply) -> BaseModel:
        return ChatCompletionStreamResponse(
            **reply.header(),
            object="chat.completion.chunk",
            choices=[],
            usage=reply.usage(),
            system_fingerprint=reply.fingerprint,
        )


class Completions(_Endpoint):
    """`POST /v1/completions`: one prompt, as text or as token ids."""

    async def create(self, body: CompletionRequest, raw: Request) -> Response:
        arrival = ArrivalTime.now()  # before any work on the prompt, as for a chat
        prompt, prompt_tokens = self._prompt(body)
        # vLLM hands each prompt of a completion to the engine as `<id>-<index>`, so that is
        # the id its span carries.
        prepared = prepare(
            self.runtime,
            raw,
            body,
            "cmpl",
            prompt,
            body.max_tokens,
            prompt_tokens,
            arrival=arrival,
            engine_suffix="-0",
        )
        stream = submit(self.runtime, prepared)
        reply = self._reply(prepared, body)
        if body.stream:
            final = CompletionStreamResponse(
                **reply.header(),
                choices=[],
                usage=reply.usage(),
                system_fingerprint=reply.fingerprint,
            )
            # vLLM dumps this one with `exclude_unset=False`: defaults such as `object`
            # appear even though the serving code left them unset.
            usage_chunk = sse_event(final, exclude_unset=False, exclude_none=True)
            return stream_tokens(
                stream,
                partial(self._chunk, reply),
                first=None,
                final=usage_chunk if reply.include_usage else None,
            )
        await collect_tokens(stream)
        choice = CompletionChoice(
            index=0, text=prepared.plan.text, finish_reason=reply.finish_reason, stop_reason=None
        )
        return reply.whole(CompletionResponse, choice)

    @staticmethod
    def _prompt(body: CompletionRequest) -> tuple[str, int | None]:
        """The prompt as text, and its length when the client sent token ids."""
        if isinstance(body.prompt, list) and body.prompt and isinstance(body.prompt[0], int):
            return " ".join(str(token) for token in body.prompt), len(body.prompt)
        if isinstance(body.prompt, list):
            if len(body.prompt) != 1:
                message = "the emulator serves one prompt per request"
                raise ApiError(400, message, "BadRequestError", "prompt")
            return str(body.prompt[0]), None
        return body.prompt, None

    @staticmethod
    def _chunk(reply: _Reply, text: str, done: bool) -> BaseModel:
        choice = CompletionStreamChoice(
            index=0,
            text=text,
            logprobs=None,
            finish_reason=reply.finish_reason if done else None,
            stop_reason=None,
            prompt_token_ids=None,
            token_ids=None,
        )
        return CompletionStreamResponse(
            **reply.header(),
            object="text_completion",
            choices=[choice],
            **reply.closing_fields(done),
        )


def prepare(
    runtime: EngineRuntime,
    raw: Request,
    body: ChatCompletionRequest | CompletionRequest,
    id_prefix: str,
    prompt: str,
    max_tokens: int | None,
    prompt_tokens: int | None = None,
    *,
    arrival: ArrivalTime,
    engine_suffix: str = "",
) -> PreparedRequest:
    """Check a request against the served model and its context, plan its output and draw
    its faults; raises `ApiError` as vLLM would answer. `arrival` is when the handler took
    the request, before any of this."""
    if body.model and body.model != runtime.model_name:
        raise ApiError(404, f"The model `{body.model}` does not exist.", "NotFoundError")
    if body.n not in (None, 1):
        raise ApiError(400, "the emulator supports n=1 only", "BadRequestError", "n")
    if prompt_tokens is None:
        prompt_tokens = runtime.planner.count_prompt(prompt)
    room = runtime.preset.max_model_len - prompt_tokens
    # vLLM's `get_max_tokens`: the client's cap, else whatever the context leaves.
    limit = max_tokens if max_tokens is not None else room
    try:
        # A stated cap must fit the context; without one the prompt must leave room for a
        # token, and the planned output is checked once it is known.
        if max_tokens is not None:
            runtime.check_fits(prompt_tokens, max_tokens)
        elif room < 1:
            runtime.check_fits(prompt_tokens, 1)
        plan = runtime.planner.plan(prompt, max_tokens=limit, seed=body.seed)
        runtime.check_fits(prompt_tokens, plan.num_tokens)
    except PromptTooLong as exc:
        raise ApiError(400, str(exc), "BadRequestError") from None
    faults = runtime.trouble.draw(plan.num_tokens)
    if faults.fail:
        raise ApiError(500, "injected engine failure (--error-rate)", "InternalServerError")
    delays = engine_delays(raw.headers.get(DELAY_HEADER)) if runtime.faults_enabled else {}
    request_id = random_request_id(id_prefix)
    # The span reports the sampling parameters the engine ran with, as vLLM's output
    # processor reads them off the request's SamplingParams.
    return PreparedRequest(
        request_id=request_id,
        prompt_tokens=prompt_tokens,
        plan=plan,
        span=RequestSpanInfo(
            request_id=request_id + engine_suffix,
            trace_headers=trace_headers(raw.headers),
            max_tokens=limit,
            temperature=DEFAULT_TEMPERATURE if body.temperature is None else body.temperature,
            top_p=DEFAULT_TOP_P if body.top_p is None else body.top_p,
            n=1 if body.n is None else body.n,
        ),
        arrival=arrival,
        queue_delay=delays.get("queue", 0.0),
        prefill_delay=delays.get("prefill", 0.0),
        kv_transfer_delay=delays.get("kv_transfer", 0.0),
        faults=faults,
    )


def submit(runtime: EngineRuntime, prepared: PreparedRequest) -> RequestStream:
    try:
        return runtime.submit(prepared)
    except EngineDead as dead:
        raise ApiError(500, str(dead), "InternalServerError") from None
