"""`spanbudget serve` as a real process: logs its address, answers /healthz, and on SIGTERM or
SIGINT flushes its batched spans to the OTLP endpoint and stops its embedding process before
it exits (DESIGN §7)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from spanbudget.service.embedding import SentenceTransformerEmbedder
from spanbudget.service.ingest import ingest
from spanbudget.service.vectorstore import EdgeStore

from tests.service.conftest import SMALL_CORPUS, chat_body
from tests.support.servers import ServerThread, free_port, read_asgi_body

pytestmark = pytest.mark.slow

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            found += [int(x) for x in f.read().split()]
    return found


def running(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


class OtlpSink:
    """A minimal OTLP/HTTP protobuf receiver that keeps the span names it was sent."""

    def __init__(self) -> None:
        self.span_names: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        raw = await read_asgi_body(receive)
        if scope["path"] == "/v1/traces":
            request = ExportTraceServiceRequest.FromString(raw)
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    self.span_names.extend(span.name for span in scope_spans.spans)
        headers = [(b"content-type", b"application/x-protobuf")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture(scope="module")
def data_dir(
    embedder: SentenceTransformerEmbedder, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A data dir laid out as `spanbudget ingest` leaves it, holding the small corpus."""
    root = tmp_path_factory.mktemp("serve-data")
    store = EdgeStore(
        root / "qdrant" / "rag-docs", collection="rag-docs", dimension=embedder.dimension
    )
    try:
        ingest(SMALL_CORPUS, embedder, store)
    finally:
        store.close()
    return root


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_flushes_spans_on_shutdown_signal(
    signum: signal.Signals, data_dir: Path, upstream: ServerThread, tmp_path: Path
) -> None:
    sink = OtlpSink()
    log_path = tmp_path / "serve.log"
    with ServerThread(sink) as collector, log_path.open("w") as log:
        port = free_port()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("SPANBUDGET_", "OTEL_"))},
            "HF_HUB_OFFLINE": "1",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            # Nothing is exported on the batch schedule: only a flush at shutdown sends spans.
            "OTEL_BSP_SCHEDULE_DELAY": "600000",
        }
        command = [sys.executable, "-c", "from spanbudget.app.cli import main; main()", "serve",
                   "--listen", f"127.0.0.1:{port}", "--llm-base-url", f"{upstream.url}/v1",
                   "--data-dir", str(data_dir)]  # fmt: skip
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                assert process.poll() is None, log_path.read_text()[-3000:]
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "gateway did not start in 90 s"
                time.sleep(0.2)
            response = httpx.post(f"{url}/v1/chat/completions", json=chat_body(), timeout=30)
            assert response.status_code == 200, response.text
            assert sink.span_names == []  # still batched in the gateway
            # The model runs in a child of its own (and multiprocessing's resource tracker).
            children = children_of(process.pid)
            assert children, "no embedding process"
            process.send_signal(signum)
            assert process.wait(timeout=30) == 0  # a clean stop, not a death by signal
            deadline = time.monotonic() + 10
            while any(running(child) for child in children) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not [child for child in children if running(child)], "orphans left"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    output = log_path.read_text()
    assert f"gateway on http://127.0.0.1:{port}" in output
    assert "authentication is OFF" in output
    assert "POST /v1/chat/completions" in sink.span_names, output[-3000:]
    assert "chat test-model" in sink.span_names
