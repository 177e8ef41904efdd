"""A lean HTTP/1.1 client for streamed responses: keep-alive connections, h11's framing.

The load tester's clock is only as punctual as its event loop is idle. Through httpx, a
streamed chat request cost the generator about 2.5 ms of CPU, half of it in the client's
layers (auth and redirect handling, the connection pool's bookkeeping, anyio's stream
wrappers, the response byte-stream chain; bench/loadgen.py sampled with py-spy). At 200
requests/s that kept the loop busy half the time, and the dispatcher woke late behind it.

This client keeps what such a request needs and nothing more: h11 (the parser httpx uses)
frames the messages, asyncio's streams carry the bytes, and the most recently returned
idle connection to an origin is lent to the next request. A connection the server closed
while idle is noticed (its reader is at EOF) and dropped before it is lent, and one idle
for `keepalive_s` (4 s) is closed rather than reused: uvicorn, which serves vLLM and the
gateway, closes an idle connection after 5 s, and a request written at that moment is
answered with a reset (seen once in a demo run's burst, which followed a quiet phase).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import h11

from ..errors import CollectorError

__all__ = ["HTTPError", "Response", "StreamingClient", "sse_data"]

READ_SIZE = 65536


class HTTPError(CollectorError):
    """The server broke the protocol or the connection."""


class _Connection:
    __slots__ = ("h11", "idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(our_role=h11.CLIENT)
        self.idle_since = 0.0  # loop time it was last given back

    def alive(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class Response:
    """A response whose body is read as it arrives; valid inside `StreamingClient.stream`."""

    __slots__ = ("_connection", "_timeout", "_timeout_s", "headers", "status_code")

    def __init__(
        self,
        status_code: int,
        headers: list[tuple[bytes, bytes]],
        connection: _Connection,
        timeout: asyncio.Timeout,
        timeout_s: float,
    ) -> None:
        self.status_code = status_code
        self.headers = headers  # names lower-cased, in order
        self._connection = connection
        self._timeout = timeout
        self._timeout_s = timeout_s

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive, until the message ends."""
        while True:
            event = _next_event(self._connection)
            if event is h11.NEED_DATA:
                await _receive(self._connection, self._timeout, self._timeout_s)
            elif type(event) is h11.Data:
                yield bytes(event.data)
            elif type(event) is h11.EndOfMessage:
                return
            elif type(event) is h11.ConnectionClosed:
                raise HTTPError("the server closed the connection inside the body")

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])


def _next_event(connection: _Connection) -> object:
    try:
        event = connection.h11.next_event()
    except h11.RemoteProtocolError as exc:  # e.g. the body ended before its length
        raise HTTPError(str(exc)) from exc
    if event is h11.PAUSED:  # h11 waits for a new cycle: nothing here may loop on it
        raise HTTPError("the response cannot continue on this connection")
    return event


async def _receive(connection: _Connection, timeout: asyncio.Timeout, timeout_s: float) -> None:
    timeout.reschedule(asyncio.get_running_loop().time() + timeout_s)
    data = await connection.reader.read(READ_SIZE)
    try:
        connection.h11.receive_data(data)  # b"" tells h11 the server closed its side
    except RuntimeError as exc:  # data after the server said it had closed
        raise HTTPError(str(exc)) from exc


class StreamingClient:
    """At most `max_connections` requests at once, each on a connection of its own.

    Up to `max_idle` connections per origin are kept alive between requests, each for at
    most `keepalive_s`; one returned beyond that is closed. `read_timeout_s` bounds each
    wait for the server's bytes.
    """

    def __init__(
        self,
        max_connections: int,
        *,
        max_idle: int = 64,
        keepalive_s: float = 4.0,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._max_idle = max_idle
        self._keepalive_s = keepalive_s
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._ssl_context = ssl_context
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._closed = False

    def idle(self) -> int:
        """Connections kept alive and not lent out now."""
        return sum(len(connections) for connections in self._idle.values())

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        url: str,
        *,
        body: bytes = b"",
        headers: Sequence[tuple[str, str]] = (),
    ) -> AsyncIterator[Response]:
        """Send a request and yield its response once its headers are in.

        The connection goes back to the pool if the body was read to its end, and is
        closed otherwise.
        """
        if self._closed:
            raise RuntimeError("the client is closed")
        parts = urlsplit(url)
        scheme = parts.scheme
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if scheme == "https" else 80)
        origin = (scheme, parts.hostname, port)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        host = parts.netloc.rpartition("@")[2]
        request = h11.Request(
            method=method,
            target=target,
            headers=[("Host", host), ("Content-Length", str(len(body))), *headers],
        )
        async with self._slots:
            connection = await self._lend(origin)
            reusable = False
            try:
                async with asyncio.timeout(None) as timeout:
                    wire = [connection.h11.send(request)]
                    if body:
                        wire.append(connection.h11.send(h11.Data(data=body)))
                    wire.append(connection.h11.send(h11.EndOfMessage()))
                    connection.writer.write(b"".join(part for part in wire if part))
                    response = await self._response(connection, timeout)
                    yield response
                state = connection.h11
                reusable = state.our_state is h11.DONE and state.their_state is h11.DONE
            finally:
                self._give_back(origin, connection, reusable)

    async def _response(self, connection: _Connection, timeout: asyncio.Timeout) -> Response:
        while True:
            event = _next_event(connection)
            if event is h11.NEED_DATA:
                await _receive(connection, timeout, self._read_timeout_s)
            elif type(event) is h11.Response:
                return Response(
                    event.status_code,
                    list(event.headers),
                    connection,
                    timeout,
                    self._read_timeout_s,
                )
            elif type(event) is h11.ConnectionClosed:
                raise HTTPError("the server closed the connection before answering")
            # an informational (1xx) response: wait for the final one

    async def _lend(self, origin: tuple[str, str, int]) -> _Connection:
        idle = self._idle.get(origin)
        if idle:
            now = asyncio.get_running_loop().time()
            while idle:
                connection = idle.pop()
                if now - connection.idle_since < self._keepalive_s and connection.alive():
                    return connection
                connection.close()
        scheme, host, port = origin
        context = None
        if scheme == "https":
            context = self._ssl_context or ssl.create_default_context()
        async with asyncio.timeout(self._connect_timeout_s):
            reader, writer = await asyncio.open_connection(host, port, ssl=context, limit=READ_SIZE)
        return _Connection(reader, writer)

    def _give_back(
        self, origin: tuple[str, str, int], connection: _Connection, reusable: bool
    ) -> None:
        idle = self._idle.setdefault(origin, [])
        if reusable and not self._closed and len(idle) < self._max_idle:
            connection.h11.start_next_cycle()
            connection.idle_since = asyncio.get_running_loop().time()
            idle.append(connection)
        else:
            connection.close()

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    async def __aenter__(self) -> StreamingClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()


async def sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The data of each event in a `text/event-stream` body, as the HTML standard
    (§9.2.6, "Interpreting an event stream") parses it: lines end at CR, LF or CRLF,
    `data` lines join with LF, a blank line dispatches, an event with no data is not
    dispatched, comments and other fields are skipped, and an unterminated last event is
    dropped."""
    pending = b""
    data: list[str] = []
    first = True
    async for chunk in chunks:
        pending += chunk
        if first and pending:
            first = False
            pending = pending.removeprefix(b"\xef\xbb\xbf")
        lines = pending.splitlines(keepends=True)
        pending = b""
        if lines and (not lines[-1].endswith((b"\n", b"\r")) or lines[-1].endswith(b"\r")):
            pending = lines.pop()  # incomplete, or a CR whose LF may be in the next chunk
        for line in lines:
            line = line.rstrip(b"\r\n")
            if not line:
                if data:
                    yield "\n".join(data)
                    data = []
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                if value.startswith(b" "):
                    value = value[1:]
                data.append(value.decode("utf-8", "replace"))
    if pending == b"\r" and data:
        yield "\n".join(data)  # the blank line ending the last event was a lone CR
