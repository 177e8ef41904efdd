"""Loopback servers for tests: an ASGI app under uvicorn in a thread (the real network hop),
a free port for a process to listen on, waiting until something has happened, reading a
raw ASGI app's request body, and an app that records the connections it is asked on."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Literal

import uvicorn

__all__ = ["RecordingApp", "ServerThread", "free_port", "read_asgi_body", "wait_until"]


async def read_asgi_body(receive: Callable[[], Awaitable[Any]]) -> bytes:
    """A raw ASGI app's whole request body, from its `http.request` messages."""
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


_GIVEN: set[int] = set()  # ports handed out in this test session


def _worker_share() -> tuple[int, int]:
    """This pytest-xdist worker's number and how many there are ((0, 1) outside xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw3": the fourth worker
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return (int(worker.removeprefix("gw")), count) if worker.startswith("gw") else (0, 1)


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (for a process that binds it itself),
    and not handed out before in this session: a test that starts a dozen processes would
    otherwise, now and then, be given one port twice. Under pytest-xdist each worker takes
    only its own share of the ports, so no two workers are ever handed the same one between
    asking and binding. The share goes by port // 2: Linux binds port 0 to odd ports only
    (it keeps the even ones for outgoing connections)."""
    index, count = _worker_share()
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port // 2 % count == index and port not in _GIVEN:
            _GIVEN.add(port)
            return port


def wait_until(
    check: Callable[[], object], what: str, timeout: float = 15.0, every: float = 0.05
) -> None:
    """Poll `check` until it is truthy; fail the test naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


class ServerThread:
    """Serve `app` on 127.0.0.1 (a given port, or a free one) until the `with` block ends."""

    def __init__(self, app: Any, port: int = 0, lifespan: Literal["on", "off"] = "off") -> None:
        # IPPROTO_TCP named, as getaddrinfo would: asyncio sets TCP_NODELAY only on sockets
        # whose proto says TCP, and without it every reused connection waits out the
        # peer's delayed ACK (about 40 ms a response).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="critical", lifespan=lifespan, ws="none", timeout_graceful_shutdown=2
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


class RecordingApp:
    """An ASGI app that answers after `hold_s`, noting each request's client port and the
    most requests it held at once. `/chunked` streams its body; `/close` asks the client to
    close the connection after the answer."""

    def __init__(self, hold_s: float = 0.0) -> None:
        self.hold_s = hold_s
        self.ports: list[int] = []
        self.bodies: list[bytes] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        assert scope["type"] == "http"
        self.ports.append(scope["client"][1])
        body = await read_asgi_body(receive)
        self.bodies.append(body)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(self.hold_s)
        self.in_flight -= 1
        headers = [(b"connection", b"close")] if scope["path"] == "/close" else []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if scope["path"] == "/chunked":
            for part in (b"data: a\n\n", b"data: b\n", b"\ndata: [DONE]\n\n"):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        else:
            await send({"type": "http.response.body", "body": b"data: ok\n\n"})
