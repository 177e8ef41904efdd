"""The vLLM-compatible HTTP surface of the emulator: OpenAI endpoints, health and metrics.

Parses requests, hands them to the `EngineRuntime`, and formats the token events as vLLM
would: one token per streamed delta, the usage chunk when asked for, then `data: [DONE]`.
Which fields each chunk carries, and when, follows vLLM's serving code (see protocol.py).
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import json
import logging
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

from spanbudget.service.engine.engine_loop import EngineDead
from spanbudget.service.engine.faults import DELAY_HEADER, engine_delays
from spanbudget.service.engine.generation import render_chat_prompt
from spanbudget.service.engine.protocol import (
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
    RequestParameterError,
    TokenChunkEncoder,
    model_card,
    random_request_id,
    sse_event,
    system_fingerprint,
    usage,
)
from spanbudget.service.engine.runtime import (
    EngineRuntime,
    PreparedRequest,
    PromptTooLong,
    RequestStream,
)
from spanbudget.service.engine.tracing import RequestSpanInfo, trace_headers

__all__ = ["StreamDropped", "create_app", "quiet_deliberate_cuts"]

log = logging.getLogger("spanbudget.engine")

# What vLLM samples with when a request leaves these unset (`_DEFAULT_SAMPLING_PARAMS` in
# its chat and completion protocol modules). A real server started with the default
# `--generation-config auto` takes the model's generation_config.json first instead.
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0


class StreamDropped(RuntimeError):
    """Raised inside a response body to cut the connection, as an injected fault."""


# uvicorn's complaint when an app returns with its response unfinished. A dropped stream
# does that on purpose, and says so itself, so the complaint is only noise there.
_UVICORN_INCOMPLETE = "ASGI callable returned without completing response."
_cut_on_purpose: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "spanbudget_engine_cut_on_purpose", default=False
)


class _DeliberateCutFilter(logging.Filter):
    """Hides uvicorn's incomplete-response error for responses this app cut on purpose.

    uvicorn logs it from the request's own task, right after the app returns, so the
    context variable the app set is still visible there; every other record passes.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_cut_on_purpose.get() and record.getMessage() == _UVICORN_INCOMPLETE)


def quiet_deliberate_cuts() -> None:
    """Keep uvicorn from logging an error for each stream this app cut on purpose.

    It changes uvicorn's logger, shared by the whole process: the process entry point calls
    it (`spanbudget engine`, a test's server), not `create_app`.
    """
    server_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _DeliberateCutFilter) for f in server_log.filters):
        server_log.addFilter(_DeliberateCutFilter())


class _TokenStreamResponse(StreamingResponse):
    """Aborts the request whenever the response ends, even if its body never started.

    A client that leaves before the first chunk is asked for gets the body cancelled before
    it runs, so the body's own clean-up never happens; vLLM aborts such requests too.

    A `StreamDropped` from the body ends the response unfinished: no closing chunk, no
    `[DONE]`, and the server closes the connection, as when the upstream process dies.
    """

    def __init__(self, content: AsyncIterator[bytes], stream: RequestStream) -> None:
        super().__init__(content, media_type="text/event-stream")
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except StreamDropped as drop:
            _cut_on_purpose.set(True)
            request_id = self._stream.request.request_id
            log.warning("%s, %s: connection closed mid-stream", drop, request_id)
        finally:
            self._stream.abort()


class _ApiError(Exception):
    def __init__(
        self, status: int, message: str, error_type: str, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param


def _error_response(
    status: int, message: str, error_type: str, param: str | None = None
) -> JSONResponse:
    body = ErrorResponse(
        error=ErrorInfo(message=message, type=error_type, param=param, code=status)
    )
    return JSONResponse(body.model_dump(), status_code=status)


def _validation_error(exc: RequestValidationError) -> JSONResponse:
    """vLLM's answer to a request its models reject: 400, type `Bad Request`, and `param`
    naming the field (the one a validator blamed, else the first error's location).

    The message lists locations and reasons only: echoing the input would put prompt text
    into error bodies and the logs that keep them.
    """
    errors = exc.errors()
    param = next(
        (
            error["ctx"]["error"].parameter
            for error in errors
            if isinstance(error.get("ctx", {}).get("error"), RequestParameterError)
        ),
        None,
    )
    if param is None and errors:
        param = ".".join(str(part) for part in errors[0].get("loc", ()))
    label = "error" if len(errors) == 1 else "errors"
    lines = [f"{len(errors)} validation {label}:"]
    lines += [f"  {'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in errors]
    return _error_response(400, "\n".join(lines), "Bad Request", param)


def _config_hash(runtime: EngineRuntime) -> str:
    """Stands in for vLLM's `VllmConfig.compute_hash()`: changes with the served model and
    with any modelled hardware or engine setting."""
    config = {"model": runtime.model_name, **dataclasses.asdict(runtime.preset)}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


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
    fingerprint = system_fingerprint(
        tensor_parallel_size=runtime.preset.num_gpus, config_hash=_config_hash(runtime)
    )

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation_error(exc)

    @app.exception_handler(_ApiError)
    async def api_error(request: Request, exc: _ApiError) -> JSONResponse:
        return _error_response(exc.status, exc.message, exc.error_type, exc.param)

    # Like vLLM's /health: 503 once the engine core is dead, so that orchestrators restart it.
    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=503 if runtime.loop.dead else 200)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        if runtime.loop.dead:
            return JSONResponse({"status": "dead", "error": str(runtime.loop.dead)}, 503)
        return JSONResponse({"status": "ok"})

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
        prompt = render_chat_prompt(body.messages, runtime.preset.chat_template)
        prepared = _prepare(runtime, raw, body, "chatcmpl", prompt, body.token_limit)
        stream = _submit(runtime, prepared)
        created = int(time.time())
        model = runtime.model_name
        num_tokens = prepared.plan.num_tokens
        finish_reason = prepared.plan.finish_reason
        include_usage = _include_usage(body)

        def chunk(text: str, done: bool) -> BaseModel:
            # vLLM's chat stream generator sets `stop_reason` on the finishing choice only,
            # and stamps the fingerprint there when no usage chunk is to follow.
            finish: dict[str, Any] = {"finish_reason": None}
            if done:
                finish = {"finish_reason": finish_reason, "stop_reason": None}
            top: dict[str, Any] = {}
            if done and not include_usage:
                top["system_fingerprint"] = fingerprint
            choice = ChatStreamChoice(
                index=0, delta=DeltaMessage(content=text), logprobs=None, token_ids=None, **finish
            )
            return ChatCompletionStreamResponse(
                id=prepared.request_id,
                object="chat.completion.chunk",
                created=created,
                model=model,
                choices=[choice],
                **top,
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
                prompt_token_ids=None,
                prompt_text=None,
            )
            final = ChatCompletionStreamResponse(
                id=prepared.request_id,
                object="chat.completion.chunk",
                created=created,
                model=model,
                choices=[],
                usage=usage(prepared.prompt_tokens, num_tokens),
                system_fingerprint=fingerprint,
            )
            return _streaming(
                stream,
                chunk,
                first=sse_event(role),
                final=sse_event(final, exclude_none=True) if include_usage else None,
            )
        await _collect(stream)
        message = ChatMessage(role="assistant", content=prepared.plan.text, reasoning=None)
        response = ChatCompletionResponse(
            id=prepared.request_id,
            created=created,
            model=model,
            choices=[
                ChatChoice(index=0, message=message, finish_reason=finish_reason, stop_reason=None)
            ],
            usage=usage(prepared.prompt_tokens, num_tokens),
            system_fingerprint=fingerprint,
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
                raise _ApiError(400, message, "BadRequestError", "prompt")
            prompt = str(body.prompt[0])
        else:
            prompt = body.prompt
        # vLLM hands each prompt of a completion to the engine as `<id>-<index>`, so that is
        # the id its span carries.
        prepared = _prepare(
            runtime, raw, body, "cmpl", prompt, body.max_tokens, prompt_tokens, engine_suffix="-0"
        )
        stream = _submit(runtime, prepared)
        created = int(time.time())
        model = runtime.model_name
        num_tokens = prepared.plan.num_tokens
        finish_reason = prepared.plan.finish_reason
        include_usage = _include_usage(body)

        def chunk(text: str, done: bool) -> BaseModel:
            top: dict[str, Any] = {}
            if done and not include_usage:
                top["system_fingerprint"] = fingerprint
            choice = CompletionStreamChoice(
                index=0,
                text=text,
                logprobs=None,
                finish_reason=finish_reason if done else None,
                stop_reason=None,
                prompt_token_ids=None,
                token_ids=None,
            )
            return CompletionStreamResponse(
                id=prepared.request_id,
                object="text_completion",
                created=created,
                model=model,
                choices=[choice],
                **top,
            )

        if body.stream:
            final = CompletionStreamResponse(
                id=prepared.request_id,
                created=created,
                model=model,
                choices=[],
                usage=usage(prepared.prompt_tokens, num_tokens),
                system_fingerprint=fingerprint,
            )
            # vLLM dumps this one with `exclude_unset=False`: defaults such as `object`
            # appear even though the serving code left them unset.
            usage_chunk = sse_event(final, exclude_unset=False, exclude_none=True)
            return _streaming(
                stream, chunk, first=None, final=usage_chunk if include_usage else None
            )
        await _collect(stream)
        response = CompletionResponse(
            id=prepared.request_id,
            created=created,
            model=model,
            choices=[
                CompletionChoice(
                    index=0, text=prepared.plan.text, finish_reason=finish_reason, stop_reason=None
                )
            ],
            usage=usage(prepared.prompt_tokens, num_tokens),
            system_fingerprint=fingerprint,
        )
        return JSONResponse(response.model_dump())

    return app


def _include_usage(body: ChatCompletionRequest | CompletionRequest) -> bool:
    """vLLM's `should_include_usage` without `--enable-force-include-usage`."""
    return bool(body.stream_options and body.stream_options.include_usage)


def _prepare(
    runtime: EngineRuntime,
    raw: Request,
    body: ChatCompletionRequest | CompletionRequest,
    id_prefix: str,
    prompt: str,
    max_tokens: int | None,
    prompt_tokens: int | None = None,
    *,
    engine_suffix: str = "",
) -> PreparedRequest:
    if body.model and body.model != runtime.model_name:
        raise _ApiError(404, f"The model `{body.model}` does not exist.", "NotFoundError")
    if body.n not in (None, 1):
        raise _ApiError(400, "the emulator supports n=1 only", "BadRequestError", "n")
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
        raise _ApiError(400, str(exc), "BadRequestError") from None
    faults = runtime.trouble.draw(plan.num_tokens)
    if faults.fail:
        raise _ApiError(500, "injected engine failure (--error-rate)", "InternalServerError")
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
        queue_delay=delays.get("queue", 0.0),
        prefill_delay=delays.get("prefill", 0.0),
        faults=faults,
    )


def _submit(runtime: EngineRuntime, prepared: PreparedRequest) -> RequestStream:
    try:
        return runtime.submit(prepared)
    except EngineDead as dead:
        raise _ApiError(500, str(dead), "InternalServerError") from None


async def _collect(stream: RequestStream) -> None:
    drop_after = stream.request.faults.drop_after_tokens
    received = 0
    try:
        async for batch in stream.batches():
            received += len(batch)
            if drop_after is not None and received >= drop_after:
                raise _ApiError(500, "injected engine failure (--drop-rate)", "InternalServerError")
    except EngineDead as dead:
        raise _ApiError(500, str(dead), "InternalServerError") from None
    finally:
        stream.abort()


def _streaming(
    stream: RequestStream,
    chunk: Callable[[str, bool], BaseModel],
    *,
    first: bytes | None,
    final: bytes | None,
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
                    out.append(pending_first)
                    pending_first = None
                for event in batch:
                    out.append(encoder.encode(pieces[event.index], event.finished))
                    sent += 1
                    if drop_after is not None and sent >= drop_after:
                        break
                yield b"".join(out)
                if drop_after is not None and sent >= drop_after:
                    raise StreamDropped(f"injected stream drop after {sent} tokens (--drop-rate)")
            if final is not None:
                yield final
            yield SSE_DONE
        except EngineDead as dead:
            # Headers are out: cut the stream, as a crashed engine's connection is cut.
            raise StreamDropped(str(dead)) from None
        finally:
            stream.abort()

    return _TokenStreamResponse(body(), stream)
