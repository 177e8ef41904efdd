"""The gateway's lending transport (its LLM client's): one connection per request in
flight, kept alive and reused."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from spanbudget.common.connections import LendingTransport

from tests.support.servers import RecordingApp, ServerThread, free_port


async def fetch(client: httpx.AsyncClient, url: str) -> bytes:
    async with client.stream("GET", url) as response:
        return b"".join([part async for part in response.aiter_bytes()])


def test_concurrent_requests_get_connections_of_their_own_and_reuse_them() -> None:
    app = RecordingApp(hold_s=0.2)

    async def run(url: str) -> tuple[int, int]:
        transport = LendingTransport(max_connections=10, max_idle=3)
        async with httpx.AsyncClient(transport=transport) as client:
            assert (
                await asyncio.gather(*(fetch(client, url) for _ in range(5)))
                == [b"data: ok\n\n"] * 5
            )
            idle_after_burst = transport.idle
            for _ in range(6):
                await fetch(client, url)
            return idle_after_burst, transport.idle

    with ServerThread(app) as server:
        idle_after_burst, idle_at_end = asyncio.run(run(server.url))
    burst, after = app.ports[:5], app.ports[5:]
    assert app.most_in_flight == 5
    assert len(set(burst)) == 5
    assert idle_after_burst == 3  # the two returned beyond max_idle were closed
    assert idle_at_end == 3
    assert len(set(after)) == 1  # one kept connection, reused
    assert after[0] in burst


def test_no_more_requests_in_flight_than_connections_allowed() -> None:
    app = RecordingApp(hold_s=0.1)

    async def run(url: str) -> None:
        async with httpx.AsyncClient(transport=LendingTransport(max_connections=2)) as client:
            await asyncio.gather(*(fetch(client, url) for _ in range(6)))

    with ServerThread(app) as server:
        asyncio.run(run(server.url))
    assert len(app.ports) == 6
    assert app.most_in_flight == 2
    assert len(set(app.ports)) == 2


def test_a_failed_request_gives_its_connection_back() -> None:
    url = f"http://127.0.0.1:{free_port()}/"  # nothing listens there

    async def run() -> None:
        transport = LendingTransport(max_connections=1)
        async with httpx.AsyncClient(transport=transport) as client:
            for _ in range(3):  # with the one slot kept by a failure, the second would hang
                with pytest.raises(httpx.ConnectError):
                    async with asyncio.timeout(5):
                        await client.get(url)
            assert transport.idle == 1

    asyncio.run(run())


def test_a_closed_transport_lends_nothing() -> None:
    async def run() -> None:
        transport = LendingTransport(max_connections=1)
        await transport.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            await transport.handle_async_request(httpx.Request("GET", "http://127.0.0.1:1/"))

    asyncio.run(run())
