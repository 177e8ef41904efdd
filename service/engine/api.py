"""The vLLM-compatible HTTP surface of the emulator: OpenAI endpoints, health and metrics.

Parses requests, hands them to the `EngineRuntime`, and formats the token events as vLLM
would: one token per streamed delta, the usage chunk when asked for, then `data: [DONE]`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from service.engine.faults import DELAY_HEADER, parse_delay_header
from service.engine.generation import render_chat_prompt
from service.engine.protocol import (
    SSE_DONE,
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
    ErrorInfo,
    ErrorResponse,
    TokenChunkEncoder,
    model_card,
    random_request_id,
    sse_event,
    usage,
)
from service.engine.runtime import EngineRuntime, PreparedRequest, PromptTooLong, RequestStream
from service.engine.tracing import RequestSpanInfo, trace_headers

__all__ = ["StreamDropped", "create_app"]


class StreamDropped(RuntimeError):
    """Raised inside a response body to cut the connection, as an injected fault."""


class _TokenStreamResponse(StreamingResponse):
    """Aborts the request whenever the response ends, even if its body never started.

    A client that leaves before the first chunk is asked for gets the body cancelled before
    it runs, so the body's own clean-up never happens; vLLM aborts such requests too.
    """

    def __init__(self, content: AsyncIterator[bytes], stream: RequestStream) -> None:
        super().__init__(content, media_type="text/event-stream")
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._stream.abort()


class _ApiError(Exception):
    def __init__(self, status: int, message: str, error_type: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type


def _error_response(status: int, message: str, error_type: str) -> JSONResponse:
    body = ErrorResponse(error=ErrorInfo(message=message, type=error_type, code=status))
    return JSONResponse(body.model_dump(), status_code=status)


def create_app(
    runtime: EngineRuntime, *, on_shutdown: Sequence[Callable[[], None]] = ()
) -> FastAPI:
    """The ASGI app; its lifespan runs the engine core (tests may run it themselves).

    `on_shutdown` runs after the engine core has stopped, for example to flush spans:
    uvicorn re-raises SIGTERM once the server is down, so later code may never run.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with runtime.running():
            yield
        for hook in on_shutdown:
            hook()

    app = FastAPI(title="spanbudget engine emulator (vLLM-compatible)", lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error_response(400, str(exc.errors()), "BadRequestError")

    @app.exception_handler(_ApiError)
    async def api_error(request: Request, exc: _ApiError) -> JSONResponse:
        return _error_response(exc.status, exc.message, exc.error_type)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = model_card(runtime.model_name, runtime.preset.max_model_len, runtime.created)
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(runtime.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/emulator/steps")
    async def steps(since: float = 0.0) -> list[dict[str, float]]:
        """Emulator-only: modelled against actual step times (for bench/engine.py)."""
        return [
            {
                "start": r.start,
                "modelled_seconds": r.modelled_seconds,
                "actual_seconds": r.actual_seconds,
                "stall_seconds": r.stall_seconds,
                "num_seqs": r.num_seqs,
                "num_tokens": r.num_tokens,
            }
            for r in runtime.loop.records()
            if r.start >= since
        ]

    @app.get("/emulator/core")
    async def core() -> dict[str, str | int | None]:
        """Emulator-only: where the step loop runs and at what CPU priority."""
        loop = runtime.loop
        return {
            "engine_core": runtime.core,
            "step_thread_id": loop.step_thread_id,
            "scheduling": loop.scheduling,
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest, raw: Request) -> Response:
        prompt = render_chat_prompt(body.messages)
        prepared = _prepare(runtime, raw, body, "chatcmpl", prompt, body.token_limit)
        stream = runtime.submit(prepared)
        created = int(time.time())
        model = runtime.model_name
        pieces = prepared.plan.pieces
        finish_reason = prepared.plan.finish_reason

        def chunk(text: str, done: bool) -> BaseModel:
            choice = ChatStreamChoice(
                index=0,
                delta=DeltaMessage(content=text),
                logprobs=None,
                finish_reason=finish_reason if done else None,
                **({"stop_reason": None} if done else {}),
            )
            return ChatCompletionStreamResponse(
                id=prepared.request_id,
                object="chat.completion.chunk",
                created=created,
                model=model,
                choices=[choice],
            )

        if body.stream:
            role = ChatCompletionStreamResponse(
                id=prepared.request_id,
                object="chat.completion.chunk",
                created=created,
                model=model,
                choices=[
                    ChatStreamChoice(
                        index=0,
                        delta=DeltaMessage(role="assistant", content=""),
                        logprobs=None,
                        finish_reason=None,
                    )
                ],
            )
            final = ChatCompletionStreamResponse(
                id=prepared.request_id,
                object="chat.completion.chunk",
                created=created,
                model=model,
                choices=[],
                usage=usage(prepared.prompt_tokens, len(pieces)),
            )
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return _streaming(stream, chunk, first=role, final=final if include_usage else None)
        await _collect(stream)
        message = ChatMessage(role="assistant", content=prepared.plan.text)
        response = ChatCompletionResponse(
            id=prepared.request_id,
            created=created,
            model=model,
            choices=[ChatChoice(index=0, message=message, finish_reason=finish_reason)],
            usage=usage(prepared.prompt_tokens, len(pieces)),
        )
        return JSONResponse(response.model_dump())

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, raw: Request) -> Response:
        prompt_tokens: int | None = None
        if isinstance(body.prompt, list) and body.prompt and isinstance(body.prompt[0], int):
            prompt_tokens = len(body.prompt)
            prompt = " ".join(str(token) for token in body.prompt)
        elif isinstance(body.prompt, list):
            if len(body.prompt) != 1:
                message = "the emulator serves one prompt per request"
                raise _ApiError(400, message, "BadRequestError")
            prompt = str(body.prompt[0])
        else:
            prompt = body.prompt
        prepared = _prepare(runtime, raw, body, "cmpl", prompt, body.max_tokens, prompt_tokens)
        stream = runtime.submit(prepared)
        created = int(time.time())
        model = runtime.model_name
        pieces = prepared.plan.pieces
        finish_reason = prepared.plan.finish_reason

        def chunk(text: str, done: bool) -> BaseModel:
            choice = CompletionStreamChoice(
                index=0,
                text=text,
                logprobs=None,
                finish_reason=finish_reason if done else None,
                stop_reason=None,
            )
            return CompletionStreamResponse(
                id=prepared.request_id,
                object="text_completion",
                created=created,
                model=model,
                choices=[choice],
            )

        if body.stream:
            final = CompletionStreamResponse(
                id=prepared.request_id,
                object="text_completion",
                created=created,
                model=model,
                choices=[],
                usage=usage(prepared.prompt_tokens, len(pieces)),
            )
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return _streaming(stream, chunk, first=None, final=final if include_usage else None)
        await _collect(stream)
        response = CompletionResponse(
            id=prepared.request_id,
            created=created,
            model=model,
            choices=[
                CompletionChoice(index=0, text=prepared.plan.text, finish_reason=finish_reason)
            ],
            usage=usage(prepared.prompt_tokens, len(pieces)),
        )
        return JSONResponse(response.model_dump())

    return app


def _prepare(
    runtime: EngineRuntime,
    raw: Request,
    body: ChatCompletionRequest | CompletionRequest,
    id_prefix: str,
    prompt: str,
    max_tokens: int | None,
    prompt_tokens: int | None = None,
) -> PreparedRequest:
    if body.model and body.model != runtime.model_name:
        raise _ApiError(404, f"The model `{body.model}` does not exist.", "NotFoundError")
    if body.n not in (None, 1):
        raise _ApiError(400, "the emulator supports n=1 only", "BadRequestError")
    if prompt_tokens is None:
        prompt_tokens = runtime.planner.count_prompt(prompt)
    room = runtime.preset.max_model_len - prompt_tokens
    try:
        if max_tokens is not None:
            runtime.check_fits(prompt_tokens, max_tokens)
        elif room < 1:
            runtime.check_fits(prompt_tokens, 1)
        plan = runtime.planner.plan(
            prompt, max_tokens=max_tokens if max_tokens is not None else room, seed=body.seed
        )
        runtime.check_fits(prompt_tokens, plan.num_tokens)
    except PromptTooLong as exc:
        raise _ApiError(400, str(exc), "BadRequestError") from None
    faults = runtime.trouble.draw(plan.num_tokens)
    if faults.fail:
        raise _ApiError(500, "injected engine failure (--error-rate)", "InternalServerError")
    delays = parse_delay_header(raw.headers.get(DELAY_HEADER)) if runtime.faults_enabled else {}
    request_id = random_request_id(id_prefix)
    return PreparedRequest(
        request_id=request_id,
        prompt_tokens=prompt_tokens,
        plan=plan,
        span=RequestSpanInfo(
            request_id=request_id,
            trace_headers=trace_headers(raw.headers),
            max_tokens=body.max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            n=body.n,
        ),
        queue_delay=delays.get("queue", 0.0),
        prefill_delay=delays.get("prefill", 0.0),
        faults=faults,
    )


async def _collect(stream: RequestStream) -> None:
    drop_after = stream.request.faults.drop_after_tokens
    received = 0
    try:
        async for batch in stream.batches():
            received += len(batch)
            if drop_after is not None and received >= drop_after:
                raise _ApiError(500, "injected engine failure (--drop-rate)", "InternalServerError")
    finally:
        stream.abort()


def _streaming(
    stream: RequestStream,
    chunk: Callable[[str, bool], BaseModel],
    *,
    first: BaseModel | None,
    final: BaseModel | None,
) -> StreamingResponse:
    drop_after = stream.request.faults.drop_after_tokens
    pieces = stream.request.plan.pieces
    encoder = TokenChunkEncoder(chunk)

    async def body() -> AsyncIterator[bytes]:
        sent = 0
        pending_first = first
        try:
            async for batch in stream.batches():
                out: list[bytes] = []
                if pending_first is not None:
                    # vLLM sends the role delta together with the first token.
                    out.append(sse_event(pending_first))
                    pending_first = None
                for event in batch:
                    out.append(encoder.encode(pieces[event.index], event.finished))
                    sent += 1
                    if drop_after is not None and sent >= drop_after:
                        break
                yield b"".join(out)
                if drop_after is not None and sent >= drop_after:
                    raise StreamDropped(f"injected stream drop after {sent} tokens")
            if final is not None:
                yield sse_event(final)
            yield SSE_DONE
        finally:
            stream.abort()

    return _TokenStreamResponse(body(), stream)
