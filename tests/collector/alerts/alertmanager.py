"""A real Alertmanager for the alert tests (Debian's, on 127.0.0.1), and a webhook receiver
that records what it is sent: Alertmanager's notifications, or the collector's own webhook."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.support.servers import free_port

__all__ = ["NULL_CONFIG", "Alertmanager", "WebhookReceiver", "notifying_config"]

NULL_CONFIG = 'route: {receiver: "null"}\nreceivers: [{name: "null"}]\n'


def notifying_config(webhook_url: str) -> str:
    """One group per alert, notified at once, resolved within a second, never repeated."""
    return f"""\
route:
  receiver: hook
  group_by: [alertname, budget, stage, severity]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 24h
receivers:
  - name: hook
    webhook_configs:
      - url: {webhook_url}
        send_resolved: true
"""


class Alertmanager:
    """A real single-node Alertmanager on loopback that can be stopped and started again."""

    def __init__(self, binary: str, workdir: Path, config: str = NULL_CONFIG) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "am.yml"
        self.config.write_text(config)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.config}",
                f"--storage.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("alertmanager did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def alerts(self, **labels: str) -> list[dict[str, Any]]:
        filters = [f'{k}="{v}"' for k, v in labels.items()]
        response = httpx.get(f"{self.url}/api/v2/alerts", params={"filter": filters}, timeout=5)
        response.raise_for_status()
        return list(response.json())


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 that keeps every JSON body POSTed to it, in order."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        received, lock = self.received, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def bodies(self) -> list[dict[str, Any]]:
        return list(self.received)
