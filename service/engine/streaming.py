"""A request's tokens on their way out: streamed as SSE, one token a delta, or gathered
for a whole response; and the stream cut on purpose when a fault says so.

Every path aborts the request in the engine when its response ends: finished, failed,
dropped, or the client gone before the first chunk.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Callable

from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from ..errors import ServiceError
from .api_errors import ApiError
from .engine_loop import EngineDead
from .protocol import SSE_DONE, TokenChunkEncoder
from .runtime import RequestStream

__all__ = ["StreamDropped", "collect_tokens", "quiet_deliberate_cuts", "stream_tokens"]

log = logging.getLogger("spanbudget.engine")


class StreamDropped(ServiceError, RuntimeError):
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


def stream_tokens(
    stream: RequestStream,
    chunk: Callable[[str, bool], BaseModel],
    *,
    first: bytes | None,
    final: bytes | None,
) -> StreamingResponse:
    """The SSE response: `first` (if any) with the first token, one `chunk(text, done)`
    event a token, `final` (if any), then `data: [DONE]`; cut after the tokens a drop
    fault allows, or when the engine dies."""
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


async def collect_tokens(stream: RequestStream) -> None:
    """Wait for every token of a non-streamed response; a drop fault or a dead engine
    becomes a 500, since no byte has gone out yet."""
    drop_after = stream.request.faults.drop_after_tokens
    received = 0
    try:
        async for batch in stream.batches():
            received += len(batch)
            if drop_after is not None and received >= drop_after:
                raise ApiError(500, "injected engine failure (--drop-rate)", "InternalServerError")
    except EngineDead as dead:
        raise ApiError(500, str(dead), "InternalServerError") from None
    finally:
        stream.abort()
