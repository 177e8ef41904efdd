"""An HTTP transport that lends out keep-alive connections, one pool per connection.

httpcore's connection pool (1.0) looks at every connection it holds each time a request
enters or leaves it: it asks each one whether its keep-alive has expired, which reads the
socket's peer address through anyio, and it counts the idle ones once per idle
connection. A pool's cost per request therefore grows with the connections it keeps: with
the dozen that 200 streamed requests a second keep open, that bookkeeping took 40 % of a
client's CPU (the load generator's, sampled with py-spy, when it still used httpx).

`LendingTransport` gives each connection a pool of its own, a one-connection
`httpx.AsyncHTTPTransport`, and lends an idle one to each request, the most recently
returned first; closing the response gives it back. A request's cost then stays that of
one connection however many are open. The gateway's LLM client uses it: its `POST`
span comes from httpx's instrumentation. The load tester has a leaner client of its own
(`http1.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx

__all__ = ["LendingTransport", "one_connection", "read_to_end"]

DRAIN_S = 1.0  # how long to read a body's end after its last event


def one_connection(context: ssl.SSLContext) -> Callable[[], httpx.AsyncBaseTransport]:
    """A factory of one-connection transports sharing `context` (building a context
    loads the CA store: milliseconds, too slow to pay per connection)."""

    def make() -> httpx.AsyncBaseTransport:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        return httpx.AsyncHTTPTransport(verify=context, limits=limits)

    return make


async def read_to_end(events: AsyncIterator[object], *errors: type[Exception]) -> None:
    """Read what follows an SSE stream's `[DONE]` (the body's end, nothing more from a
    well-behaved server) for at most `DRAIN_S`; a timeout or one of `errors` ends it.

    A streamed response closed before its end takes its connection with it, and the next
    request on that client pays a new TCP handshake.
    """
    with contextlib.suppress(TimeoutError, *errors):
        async with asyncio.timeout(DRAIN_S):
            async for _ in events:
                pass


class LendingTransport(httpx.AsyncBaseTransport):
    """At most `max_connections` requests at once, each on a connection of its own.

    Up to `max_idle` connections are kept alive between requests; one returned beyond
    that is closed.
    """

    def __init__(
        self,
        max_connections: int,
        *,
        max_idle: int = 64,
        make: Callable[[], httpx.AsyncBaseTransport] | None = None,
    ) -> None:
        self._make = make or one_connection(httpx.create_ssl_context())
        self._max_idle = max_idle
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[httpx.AsyncBaseTransport] = []
        self._closed = False

    @property
    def idle(self) -> int:
        """Connections kept alive and not lent out now."""
        return len(self._idle)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        await self._slots.acquire()
        transport = self._idle.pop() if self._idle else self._make()
        try:
            response = await transport.handle_async_request(request)
        except BaseException:
            await self._give_back(transport)
            raise
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Lent(stream, lambda: self._give_back(transport)),
            extensions=response.extensions,
        )

    async def _give_back(self, transport: httpx.AsyncBaseTransport) -> None:
        self._slots.release()
        if self._closed or len(self._idle) >= self._max_idle:
            await transport.aclose()
        else:
            self._idle.append(transport)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for transport in idle:
            await transport.aclose()


class _Lent(httpx.AsyncByteStream):
    """A response body that gives its connection back once, when it is closed."""

    def __init__(
        self, stream: httpx.AsyncByteStream, give_back: Callable[[], Awaitable[None]]
    ) -> None:
        self._stream = stream
        self._give_back: Callable[[], Awaitable[None]] | None = give_back

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # no layer of its own per chunk

    async def aclose(self) -> None:
        give_back, self._give_back = self._give_back, None
        try:
            await self._stream.aclose()
        finally:
            if give_back is not None:
                await give_back()
