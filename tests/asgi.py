"""A raw ASGI `http` scope, for tests that drive an app by hand to control disconnects."""

from __future__ import annotations

from typing import Any


def post_scope(path: str, host: str) -> dict[str, Any]:
    """A JSON POST to `path` on `host`, from a loopback client, as a server would pass it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", host.encode()), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000),
        "server": (host, 80),
    }
