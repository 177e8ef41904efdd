"""The load tester's HTTP/1.1 client against real servers: uvicorn, and raw asyncio servers
where a test needs a server to misbehave in one exact way."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from httpx_sse._decoders import SSEDecoder, SSELineDecoder
from hypothesis import given, settings
from hypothesis import strategies as st
from spanbudget.collector.loadtest.http1 import HTTPError, StreamingClient, sse_data

from tests.support.servers import RecordingApp, ServerThread


async def fetch(client: StreamingClient, url: str, body: bytes = b"") -> bytes:
    async with client.stream("POST", url, body=body) as response:
        assert response.status_code == 200
        return await response.read()


def test_a_connection_is_reused_one_per_request_in_flight_and_max_idle_kept() -> None:
    app = RecordingApp(hold_s=0.2)

    async def run(url: str) -> tuple[int, int]:
        async with StreamingClient(max_connections=10, max_idle=3) as client:
            answers = await asyncio.gather(*(fetch(client, url) for _ in range(5)))
            assert answers == [b"data: ok\n\n"] * 5
            idle_after_burst = client.idle()
            for _ in range(6):
                await fetch(client, url)
            return idle_after_burst, client.idle()

    with ServerThread(app) as server:
        idle_after_burst, idle_at_end = asyncio.run(run(server.url + "/"))
    burst, after = app.ports[:5], app.ports[5:]
    assert app.most_in_flight == 5
    assert len(set(burst)) == 5
    assert (idle_after_burst, idle_at_end) == (3, 3)
    assert len(set(after)) == 1
    assert after[0] in burst  # the last one returned, reused


def test_bodies_both_ways_content_length_and_chunked() -> None:
    app = RecordingApp()

    async def run(url: str) -> list[str]:
        async with StreamingClient(max_connections=2) as client:
            async with client.stream("POST", url + "/chunked", body=b'{"a": 1}') as response:
                data = [event async for event in sse_data(response.chunks())]
            assert await fetch(client, url + "/") == b"data: ok\n\n"
            return data

    with ServerThread(app) as server:
        data = asyncio.run(run(server.url))
    assert data == ["a", "b", "[DONE]"]
    assert app.bodies == [b'{"a": 1}', b""]
    assert len(set(app.ports)) == 1  # the chunked body was read to its end: reused


def test_no_more_than_max_connections_requests_in_flight() -> None:
    app = RecordingApp(hold_s=0.1)

    async def run(url: str) -> None:
        async with StreamingClient(max_connections=2) as client:
            await asyncio.gather(*(fetch(client, url) for _ in range(6)))

    with ServerThread(app) as server:
        asyncio.run(run(server.url + "/"))
    assert app.most_in_flight == 2
    assert len(app.ports) == 6


def test_a_connection_left_unread_or_asked_to_close_is_not_reused() -> None:
    app = RecordingApp()

    async def run(url: str) -> int:
        async with StreamingClient(max_connections=1) as client:
            async with client.stream("GET", url + "/chunked") as response:
                async for _ in response.chunks():
                    break  # the rest of the body is never read
            await fetch(client, url + "/close")
            await fetch(client, url + "/")
            return client.idle()

    with ServerThread(app) as server:
        idle = asyncio.run(run(server.url))
    assert len(set(app.ports)) == 3
    assert idle == 1


def test_a_connection_idle_past_keepalive_is_closed_not_reused() -> None:
    app = RecordingApp()

    async def run(url: str) -> None:
        async with StreamingClient(max_connections=1, keepalive_s=0.2) as client:
            await fetch(client, url)
            await fetch(client, url)  # at once: the same connection
            await asyncio.sleep(0.3)
            await fetch(client, url)  # after the keep-alive: a new one

    with ServerThread(app) as server:
        asyncio.run(run(server.url + "/"))
    first, again, later = app.ports
    assert first == again
    assert later != first


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def raw_server(handler: Handler) -> tuple[asyncio.Server, str]:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/"


async def read_request(reader: asyncio.StreamReader) -> None:
    await reader.readuntil(b"\r\n\r\n")  # these tests send no body


def test_an_idle_connection_the_server_closed_is_not_lent() -> None:
    """The server answers (keep-alive) and then closes its side while the connection is
    idle, as servers do at their keep-alive timeout: the next request opens a new one."""
    accepted = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    async def run() -> list[bytes]:
        server, url = await raw_server(handler)
        async with server, StreamingClient(max_connections=1) as client:
            first = await fetch(client, url)
            await asyncio.sleep(0.1)  # the server's FIN arrives while the connection is idle
            return [first, await fetch(client, url)]

    assert asyncio.run(run()) == [b"ok", b"ok"]
    assert accepted == 2


def test_a_body_cut_short_is_an_error_and_a_silent_server_times_out() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
        await writer.drain()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n")
        await writer.drain()
        await reader.read()  # nothing more until the client gives up and closes

    async def run() -> float:
        cut_server, cut_url = await raw_server(cut)
        silent_server, silent_url = await raw_server(silent)
        client = StreamingClient(max_connections=1, read_timeout_s=0.2)
        async with cut_server, silent_server, client:
            with pytest.raises(HTTPError):
                await fetch(client, cut_url)
            loop = asyncio.get_running_loop()
            start = loop.time()
            with pytest.raises(TimeoutError):
                async with client.stream("GET", silent_url) as response:
                    assert [part async for part in response.chunks()] == [b"ok"]
            return loop.time() - start

    waited = asyncio.run(run())
    assert 0.15 < waited < 1.0


# Streams of events that each carry data, with comments between and any line ending.
_text = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)))
_event = st.lists(_text, min_size=1, max_size=3)
_ending = st.sampled_from(["\n", "\r\n", "\r"])


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(st.tuples(_event, st.booleans(), _ending), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_sse_data_reads_what_httpx_sse_reads_however_the_bytes_are_cut(
    events: list[tuple[list[str], bool, str]], cuts: list[int]
) -> None:
    text = ""
    for lines, comment, ending in events:
        if comment:
            text += ": keep-alive" + ending
        text += "".join(f"data: {line}{ending}" for line in lines) + ending
    raw = text.encode()
    bounds = sorted({0, len(raw), *(c for c in cuts if c < len(raw))})
    pieces = [raw[a:b] for a, b in itertools.pairwise(bounds)]

    async def chunks() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    async def ours() -> list[str]:
        return [data async for data in sse_data(chunks())]

    lines, decoder = SSELineDecoder(), SSEDecoder()
    expected = []
    for line in [*lines.decode(text), *lines.flush()] if text else []:
        event = decoder.decode(line)
        if event is not None:
            expected.append(event.data)
    assert asyncio.run(ours()) == expected
