"""The gateway's FastAPI app, built by `create_app` from injected collaborators: OpenAI-
compatible chat completions with RAG, one span a stage, no module-level state."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from opentelemetry import trace
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider
from prometheus_client.exposition import choose_encoder
from spanbudget.common import semconv
from spanbudget.common.serving import BodyAborted, BodyTimeout, BodyTooLarge, read_body
from starlette.types import Receive, Scope, Send

from .. import attributes as names
from ..embedding import EmbeddingUnavailable
from ..faults import DELAY_HEADER, FaultPlan
from ..llm_client import ChatStream, LLMClient, UpstreamError
from ..prompt import PromptBuilder
from ..retrieval import Retriever
from ..settings import Settings
from ..vectorstore import StoreError
from .auth import Authenticator, AuthError
from .metrics import GatewayMetrics, MetricsMiddleware
from .ratelimit import TokenBucketLimiter
from .schemas import (
    ChatRequest,
    GatewayError,
    error_body,
    parse_chat_request,
)

__all__ = ["create_app"]

log = logging.getLogger(__name__)

_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_CLIENT_GONE = "client disconnected"


class _SSEResponse(StreamingResponse):
    """Relays an upstream stream as SSE, and ends it (and its span) on every path.

    Starlette abandons the body iterator when the client goes away; closing it here (shielded)
    runs the relay's clean-up at once. If the client left before the first chunk was asked
    for, the relay never ran at all, so the stream is ended here instead.
    """

    def __init__(self, stream: ChatStream, server_span: Span, *, include_usage: bool) -> None:
        super().__init__(
            _relay_sse(stream, server_span, include_usage=include_usage),
            media_type="text/event-stream",
            headers=_SSE_HEADERS,
        )
        self._stream = stream
        self._server_span = server_span

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
                if not self._stream.finished:
                    _mark_failed(self._server_span, "client_disconnected", _CLIENT_GONE)
                    await self._stream.finish(error=_CLIENT_GONE, error_type="client_disconnected")


def _error_response(exc: GatewayError) -> JSONResponse:
    return JSONResponse(
        error_body(exc.message, exc.error_type, exc.code, exc.param),
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def _read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The raw body, refused with the gateway's 413 as soon as it passes `limit` bytes, and
    with 408 when it is not all in after `timeout` seconds."""
    try:
        return await read_body(request, limit, timeout=timeout)
    except BodyTooLarge:
        message = f"request body exceeds {limit} bytes"
        raise GatewayError(413, message, code="request_too_large") from None
    except BodyTimeout as exc:
        raise GatewayError(408, str(exc), code="request_timeout") from None
    except BodyAborted as exc:  # nobody is left to read the answer
        raise GatewayError(400, str(exc), code="request_aborted") from None


def _set_server_ttfc(server_span: Span) -> None:
    start_ns = getattr(server_span, "start_time", None)
    if isinstance(start_ns, int):
        server_span.set_attribute(
            semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, (time.time_ns() - start_ns) / 1e9
        )


def _mark_failed(span: Span, error_type: str, description: str) -> None:
    span.set_attribute(semconv.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, description))


async def _relay_sse(
    stream: ChatStream, server_span: Span, *, include_usage: bool
) -> AsyncIterator[str]:
    """Forward upstream chunks as they come; end the stream and its span on every path."""
    error: tuple[str, str] | None = None
    marked = False
    try:
        try:
            async for event in stream.events():
                if event.usage_only and not include_usage:
                    continue
                if not marked and stream.time_to_first_chunk is not None:
                    _set_server_ttfc(server_span)
                    marked = True
                yield f"data: {event.data}\n\n"
        except UpstreamError as exc:
            error = (exc.error_type, exc.message)
            _mark_failed(server_span, exc.error_type, "upstream stream failed")
            yield "data: " + json.dumps(error_body(exc.message, "upstream_error", None)) + "\n\n"
            return
        yield "data: [DONE]\n\n"
    except BaseException:
        # Cancelled (client gone) or closed at a yield: the request did not finish.
        error = ("client_disconnected", _CLIENT_GONE)
        _mark_failed(server_span, "client_disconnected", _CLIENT_GONE)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            kind, message = error if error else (None, None)
            await stream.finish(error=message, error_type=kind)


async def _collect(stream: ChatStream, request: ChatRequest) -> dict[str, Any]:
    """Drain the upstream stream into one non-streamed ChatCompletion object."""
    parts: list[str] = []
    error: tuple[str, str] | None = None
    try:
        async for event in stream.events():
            parts.append(event.content)
    except UpstreamError as exc:
        error = (exc.error_type, exc.message)
        raise GatewayError(502, exc.message, error_type="upstream_error") from None
    except BaseException:
        error = ("cancelled", "request cancelled")
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await stream.finish(
                error=error[1] if error else None, error_type=error[0] if error else None
            )
    prompt_tokens = stream.input_tokens or 0
    completion_tokens = stream.output_tokens or 0
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(parts)},
                "finish_reason": (stream.finish_reasons or ["stop"])[-1],
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def create_app(
    settings: Settings,
    tracer_provider: TracerProvider,
    retriever: Retriever,
    prompt_builder: PromptBuilder,
    llm_client: LLMClient,
) -> FastAPI:
    """Build the gateway; it closes `llm_client`'s connection pool at shutdown."""
    auth = Authenticator(
        settings.api_keys,
        jwt_secret=settings.jwt_secret,
        jwt_algorithms=settings.jwt_algorithms,
        jwt_audience=settings.jwt_audience,
        jwt_issuer=settings.jwt_issuer,
    )
    limiter = TokenBucketLimiter(settings.rate_limit_per_second, settings.rate_limit_burst)
    tracer = tracer_provider.get_tracer("service.gateway")
    metrics = GatewayMetrics()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not auth.enabled:
            log.warning("authentication is OFF: set SPANBUDGET_API_KEYS to require API keys")
        try:
            yield
        finally:
            await llm_client.aclose()

    app = FastAPI(title="spanbudget RAG gateway", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.exception_handler(GatewayError)
    async def _gateway_error(_: Request, exc: GatewayError) -> JSONResponse:
        return _error_response(exc)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        # 503 once the embedding process is gone for good, so that a supervisor restarts us.
        if not retriever.alive:
            return JSONResponse({"status": "embeddings unavailable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def prometheus_metrics(request: Request) -> Response:
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(metrics.registry), media_type=content_type)

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        ready = await anyio.to_thread.run_sync(retriever.ready)
        body = {"status": "ready" if ready else "not ready", "collection": retriever.collection}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        # Requests name the upstream's models, so list those; the setting is the fallback.
        try:
            cards = await llm_client.list_models()
        except UpstreamError:
            cards = [
                {
                    "id": settings.llm_model,
                    "object": "model",
                    "created": 0,
                    "owned_by": "spanbudget",
                }
            ]
        return {"object": "list", "data": cards}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        server_span = trace.get_current_span()
        delay_header = request.headers.get(DELAY_HEADER)
        faults = FaultPlan.from_header(delay_header, enabled=settings.faults)

        with tracer.start_as_current_span(names.SPAN_VALIDATE, record_exception=False) as span:
            await faults.inject("gateway", span)
            raw = await _read_body(request, settings.max_body_bytes, settings.body_timeout_seconds)
            span.set_attribute(semconv.HTTP_REQUEST_BODY_SIZE, len(raw))
            chat = parse_chat_request(raw)
            span.set_attribute(names.GATEWAY_MESSAGE_COUNT, len(chat.messages))
            query = chat.query()

        with tracer.start_as_current_span(names.SPAN_AUTH, record_exception=False) as span:
            try:
                principal = auth.verify(request.headers.get("authorization"))
            except AuthError as exc:
                raise GatewayError(
                    401,
                    str(exc),
                    error_type="authentication_error",
                    code="invalid_api_key",
                    headers={"WWW-Authenticate": exc.challenge},
                ) from None
            span.set_attributes(
                {names.AUTH_METHOD: principal.method, names.AUTH_KEY_ID: principal.key_id}
            )
            decision = limiter.acquire(principal.key_id)
            span.set_attribute(names.RATELIMIT_REMAINING, decision.remaining)
            if not decision.allowed:
                raise GatewayError(
                    429,
                    "rate limit exceeded for this key",
                    error_type="rate_limit_error",
                    code="rate_limit_exceeded",
                    headers={"Retry-After": str(decision.retry_after_seconds)},
                )

        try:
            hits = await retriever.retrieve(query, faults)
        except (StoreError, EmbeddingUnavailable) as exc:
            raise GatewayError(503, str(exc), error_type="service_unavailable") from None
        prompt = await prompt_builder.render(chat.conversation(), hits, faults)

        forward = {DELAY_HEADER: delay_header} if delay_header else {}
        try:
            stream = await llm_client.open_chat(
                chat.upstream_body(prompt.messages), headers=forward
            )
        except UpstreamError as exc:
            _mark_failed(server_span, exc.error_type, "upstream failed before the stream")
            raise GatewayError(
                exc.status_code, exc.message, error_type="upstream_error", code=exc.error_type
            ) from None

        if chat.stream:
            return _SSEResponse(stream, server_span, include_usage=chat.include_usage)
        return JSONResponse(await _collect(stream, chat))

    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=tracer_provider,
        exclude_spans=["send", "receive"],
        # Probes and the model listing (load testers call it before a run) are not requests
        # on the budgeted path: traced, each would be judged as one without a first token.
        excluded_urls="/healthz,/readyz,/metrics,/v1/models",
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
