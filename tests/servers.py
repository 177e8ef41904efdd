"""An ASGI app under uvicorn in a thread, on 127.0.0.1: the real network hop for tests."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Literal

import uvicorn

__all__ = ["ServerThread"]


class ServerThread:
    """Serve `app` on 127.0.0.1 (a given port, or a free one) until the `with` block ends."""

    def __init__(self, app: Any, port: int = 0, lifespan: Literal["on", "off"] = "off") -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
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
