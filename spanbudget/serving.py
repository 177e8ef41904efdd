"""HTTP plumbing every spanbudget server shares: the listen address, serving an ASGI app
until SIGINT or SIGTERM, and reading a request body without holding more than a limit.

A leaf: both `spanbudget.service` and `spanbudget.collector` may import it.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

from spanbudget.errors import SpanbudgetError

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = ["BodyTooLarge", "parse_listen", "read_body", "serve"]


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
        )
    )
    server.run()
    return bool(server.started)


class BodyTooLarge(SpanbudgetError):
    """A request body over its limit; each server answers it with its own 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body over {limit} bytes")
        self.limit = limit


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, refused (`BodyTooLarge`) as soon as it passes `limit` bytes: from its
    declared length before reading anything, else while it streams in."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)
