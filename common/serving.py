"""HTTP plumbing every spanbudget server shares: the listen address, serving an ASGI app
until SIGINT or SIGTERM with a deadline for each request's headers, and reading a request
body within a size limit and a time limit.

Slow clients: a connection whose request line and headers are not in within
`HEADER_TIMEOUT_SECONDS` (from the connection's start, or from the previous response) is
closed; a body not in within `BODY_TIMEOUT_SECONDS` is refused (`BodyTimeout`, each server
answers 408); a client that goes away mid-upload is `BodyAborted`, one log line, no
traceback. Without them, a hundred slow connections each hold a descriptor for ever.

A leaf: both `spanbudget.service` and `spanbudget.collector` may import it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from .errors import SpanbudgetError

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = [
    "BODY_TIMEOUT_SECONDS",
    "HEADER_TIMEOUT_SECONDS",
    "BodyAborted",
    "BodyTimeout",
    "BodyTooLarge",
    "parse_listen",
    "read_body",
    "receive_body",
    "serve",
]

HEADER_TIMEOUT_SECONDS = 10.0
BODY_TIMEOUT_SECONDS = 30.0


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 as `[::1]:4318`) to a host and a port; raises ValueError."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"expected HOST:PORT, e.g. 127.0.0.1:4318, got {text!r}")
    number = int(port)
    if not 0 <= number <= 65535:
        raise ValueError(f"port out of range in {text!r}")
    return host.strip("[]"), number


def serve(
    app: Any,
    listen: str,
    *,
    log_level: str = "warning",
    access_log: bool = False,
    timeout_graceful_shutdown: int | None = None,
    header_timeout: float = HEADER_TIMEOUT_SECONDS,
) -> bool:
    """Serve `app` on `listen` (`HOST:PORT`) until SIGINT or SIGTERM; say whether it started.

    uvicorn stops gracefully on either signal, then re-raises it to the handlers it found
    at start-up: those are made no-ops here, so that this returns, the caller's clean-up
    runs (flush spans, close stores, stop children) and the process exits 0.
    """
    import uvicorn

    host, port = parse_listen(listen)
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, lambda _signum, _frame: None)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=access_log,
            timeout_graceful_shutdown=timeout_graceful_shutdown,
            http=header_deadline_protocol(header_timeout),
        )
    )
    server.run()
    return bool(server.started)


def header_deadline_protocol(seconds: float) -> type[Any]:
    """uvicorn's h11 protocol, closing a connection whose request line and headers are not
    complete `seconds` after it opened or after its previous response went out."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadlineProtocol(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            if self._deadline is not None and self.conn.their_state is not h11.IDLE:
                self._deadline.cancel()  # the headers are in
                self._deadline = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(seconds, self._expired)

        def _expired(self) -> None:
            self._deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadlineProtocol


class BodyTimeout(SpanbudgetError):
    """A request body that did not arrive within its time limit; answered 408."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"request body not received within {seconds:g} s")
        self.seconds = seconds


class BodyAborted(SpanbudgetError):
    """The client went away before its body was in: nobody is left to answer."""


class BodyTooLarge(SpanbudgetError):
    """A request body over its limit; each server answers it with its own 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body over {limit} bytes")
        self.limit = limit


async def read_body(
    request: Request, limit: int, *, timeout: float = BODY_TIMEOUT_SECONDS
) -> bytes:
    """The raw body, refused (`BodyTooLarge`) as soon as it passes `limit` bytes: from its
    declared length before reading anything, else while it streams in; `BodyTimeout` when
    it is not all in after `timeout` seconds, `BodyAborted` when the client left."""
    declared = request.headers.get("content-length")
    return await receive_body(request.receive, declared, limit, timeout=timeout)


async def receive_body(
    receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
    declared: str | None,
    limit: int,
    *,
    timeout: float = BODY_TIMEOUT_SECONDS,
) -> bytes:
    """`read_body` from an ASGI `receive` and the declared Content-Length (or None)."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise BodyAborted(f"client left after {size} bytes of the body")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(limit)
                if chunk:
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise BodyTimeout(timeout) from None
    return b"".join(chunks)
