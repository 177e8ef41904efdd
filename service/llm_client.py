"""Traced streaming client for an OpenAI-compatible LLM server (vLLM, the emulator).
Errors: `UpstreamError`, before the stream (an OpenAI error reply) or during it (SSE error)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.utils import suppress_http_instrumentation
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider, use_span
from spanbudget.common import semconv
from spanbudget.common.connections import LendingTransport, read_to_end

from . import attributes as names
from .errors import ServiceError

__all__ = ["ChatStream", "LLMClient", "StreamEvent", "UpstreamError"]

# How much of an upstream error body to read: enough for a message, not a flood.
_MAX_ERROR_BODY = 4096


class UpstreamError(ServiceError):
    """The LLM server failed; `status_code` is what the gateway should answer with."""

    def __init__(
        self, message: str, *, status_code: int = 502, error_type: str = "upstream_error"
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.error_type = error_type


@dataclass(frozen=True)
class StreamEvent:
    """One upstream `data:` chunk: the raw JSON (forwarded as is) and what we read from it."""

    data: str
    content: str
    usage_only: bool


@dataclass
class _Summary:
    response_id: str = ""
    response_model: str = ""
    finish_reasons: list[str] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None


class ChatStream:
    """An upstream stream that has started, with its `chat` span still open.

    Iterate `events()` once, then call `finish()` exactly once on every path (done, failed,
    client gone); the span ends there.
    """

    def __init__(self, span: Span, response: httpx.Response, started: float) -> None:
        self._span = span
        self._response = response
        self._started = started
        self._summary = _Summary()
        self._ended = False
        self._after_done: AsyncIterator[ServerSentEvent] | None = None
        self.time_to_first_chunk: float | None = None

    @property
    def input_tokens(self) -> int | None:
        return self._summary.input_tokens

    @property
    def output_tokens(self) -> int | None:
        return self._summary.output_tokens

    @property
    def finished(self) -> bool:
        """True once `finish()` has run: the response is closed and the span has ended."""
        return self._ended

    @property
    def finish_reasons(self) -> list[str]:
        return list(self._summary.finish_reasons)

    async def events(self) -> AsyncIterator[StreamEvent]:
        """Yield the chunks until `[DONE]`; raise `UpstreamError` if the stream breaks."""
        try:
            upstream = EventSource(self._response).aiter_sse()
            async for sse in upstream:
                if sse.data == "[DONE]":
                    self._after_done = upstream
                    return
                if not sse.data:
                    continue
                event = self._read(sse.data)
                yield event
        except (httpx.HTTPError, SSEError) as exc:
            raise UpstreamError(
                f"upstream stream broke: {type(exc).__name__}", error_type=type(exc).__name__
            ) from exc
        raise UpstreamError("upstream stream ended without [DONE]", error_type="incomplete_stream")

    def _read(self, data: str) -> StreamEvent:
        try:
            payload = json.loads(data)
        except json.JSONDecodeError:
            raise UpstreamError("upstream sent a malformed chunk", error_type="bad_chunk") from None
        if not isinstance(payload, dict):
            raise UpstreamError("upstream sent a malformed chunk", error_type="bad_chunk")
        if "error" in payload or payload.get("object") == "error":
            raise UpstreamError(
                "upstream reported an error mid-stream", error_type="upstream_error"
            )
        summary = self._summary
        summary.response_id = summary.response_id or str(payload.get("id", ""))
        summary.response_model = summary.response_model or str(payload.get("model", ""))
        content = ""
        choices = payload.get("choices") or []
        for choice in choices:
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            if reason := choice.get("finish_reason"):
                summary.finish_reasons.append(str(reason))
        if (content or summary.finish_reasons) and self.time_to_first_chunk is None:
            self.time_to_first_chunk = time.perf_counter() - self._started
            self._span.set_attribute(
                semconv.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, self.time_to_first_chunk
            )
        if usage := payload.get("usage"):
            summary.input_tokens = usage.get("prompt_tokens")
            summary.output_tokens = usage.get("completion_tokens")
        return StreamEvent(data=data, content=content, usage_only=not choices and bool(usage))

    async def finish(self, *, error: str | None = None, error_type: str | None = None) -> None:
        """Close the upstream response (cancelling it if unread) and end the span.

        After a complete stream the rest of the body (its end, nothing more from a
        well-behaved server) is read first, for at most a second: a response closed
        unread takes its connection with it, and the next request would pay a new TCP
        handshake to the LLM server. The span ends when the stream did, not after that.
        """
        if self._ended:
            return
        self._ended = True
        end_ns = time.time_ns()
        try:
            if self._after_done is not None and error is None:
                await read_to_end(self._after_done, httpx.HTTPError, SSEError)
            await self._response.aclose()
        finally:
            summary = self._summary
            attributes: dict[str, Any] = {
                semconv.GEN_AI_RESPONSE_ID: summary.response_id,
                semconv.GEN_AI_RESPONSE_MODEL: summary.response_model,
                semconv.GEN_AI_RESPONSE_FINISH_REASONS: summary.finish_reasons,
            }
            if summary.input_tokens is not None:
                attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] = summary.input_tokens
            if summary.output_tokens is not None:
                attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] = summary.output_tokens
            self._span.set_attributes({k: v for k, v in attributes.items() if v})
            if error is not None:
                self._span.set_attribute(semconv.ERROR_TYPE, error_type or "error")
                self._span.set_status(Status(StatusCode.ERROR, error))
            self._span.end(end_time=end_ns)


class LLMClient:
    """Opens traced chat streams to `base_url` (e.g. `http://127.0.0.1:8000/v1`)."""

    def __init__(
        self,
        base_url: str,
        tracer_provider: TracerProvider,
        *,
        provider: str = "vllm",
        api_key: str = "",
        timeout_seconds: float = 60.0,
        max_connections: int = 100,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(timeout_seconds, connect=5.0),
            transport=transport or LendingTransport(max_connections, max_idle=max_connections),
        )
        HTTPXClientInstrumentor.instrument_client(self._client, tracer_provider=tracer_provider)
        self._tracer = tracer_provider.get_tracer(__name__)
        self._provider = provider
        url = httpx.URL(base_url)
        self._server_address = url.host
        self._server_port = url.port or (443 if url.scheme == "https" else 80)

    async def open_chat(
        self, body: Mapping[str, Any], *, headers: Mapping[str, str] | None = None
    ) -> ChatStream:
        """Start a streamed chat completion; the returned stream owns the open span."""
        model = str(body.get("model", ""))
        request_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        attributes: dict[str, Any] = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_CHAT,
            semconv.GEN_AI_PROVIDER_NAME: self._provider,
            semconv.GEN_AI_REQUEST_MODEL: model,
            semconv.GEN_AI_REQUEST_STREAM: True,
            semconv.SERVER_ADDRESS: self._server_address,
            semconv.SERVER_PORT: self._server_port,
        }
        if isinstance(body.get("max_tokens"), int):
            attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] = body["max_tokens"]
        span = self._tracer.start_span(
            names.chat_span_name(model), kind=SpanKind.CLIENT, attributes=attributes
        )
        started = time.perf_counter()
        try:
            with use_span(span, end_on_exit=False, record_exception=False):
                request = self._client.build_request(
                    "POST",
                    "chat/completions",
                    json=request_body,
                    headers={"Accept": "text/event-stream", **(headers or {})},
                )
                response = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            self._fail(span, f"upstream unreachable: {type(exc).__name__}", type(exc).__name__)
            raise UpstreamError(
                f"LLM server unreachable ({type(exc).__name__})", error_type="upstream_unreachable"
            ) from exc
        except BaseException:
            self._fail(span, "cancelled before the upstream answered", "cancelled")
            raise
        if response.status_code != 200:
            try:
                detail = await _error_detail(response)
            except BaseException:
                self._fail(span, "cancelled while reading the upstream error", "cancelled")
                raise
            self._fail(span, f"upstream answered {response.status_code}", str(response.status_code))
            raise UpstreamError(
                f"LLM server answered {response.status_code}: {detail}",
                status_code=502 if response.status_code >= 500 else response.status_code,
            )
        return ChatStream(span, response, started)

    async def list_models(self) -> list[dict[str, Any]]:
        """The upstream's `/models` list; `UpstreamError` when it cannot be had."""
        try:
            # Untraced, like the gateway's own /v1/models: a lone CLIENT span would be judged.
            with suppress_http_instrumentation():
                response = await self._client.get("models", timeout=5.0)
            response.raise_for_status()
            data = response.json().get("data")
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            raise UpstreamError(f"cannot list upstream models ({type(exc).__name__})") from exc
        if not isinstance(data, list):
            raise UpstreamError("upstream /models answered without a data list")
        return [m for m in data if isinstance(m, dict)]

    @staticmethod
    def _fail(span: Span, description: str, error_type: str) -> None:
        span.set_attribute(semconv.ERROR_TYPE, error_type)
        span.set_status(Status(StatusCode.ERROR, description))
        span.end()

    async def aclose(self) -> None:
        await self._client.aclose()


async def _error_detail(response: httpx.Response) -> str:
    """The upstream's error message, if it sent a readable one (never echoes our prompt)."""
    try:
        raw = b""
        async for part in response.aiter_bytes():
            raw += part
            if len(raw) >= _MAX_ERROR_BODY:
                break
        payload = json.loads(raw[:_MAX_ERROR_BODY] or b"{}")
    except (httpx.HTTPError, ValueError):
        return "no details"
    finally:
        await response.aclose()
    error = payload.get("error") if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not message and isinstance(payload, dict):
        message = payload.get("message")
    return str(message or "no details")[:300]
