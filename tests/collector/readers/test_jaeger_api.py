"""`read_jaeger_api` against a small HTTP server on 127.0.0.1 serving the real v3 fixture."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from spanbudget.collector.readers import TraceReadError, read_jaeger_api, read_traces

from tests.support.servers import free_port

SINCE_SECONDS = 900.0


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    chunks: list[bytes] | None = None  # sent with chunked transfer encoding when set


@dataclass
class FakeJaeger:
    """A stand-in for Jaeger's query port: records requests, answers with `reply`."""

    base_url: str
    reply: Reply
    requests: list[tuple[str, dict[str, list[str]], dict[str, str]]] = field(default_factory=list)


@pytest.fixture
def jaeger(shared_fixtures: Path) -> Iterator[FakeJaeger]:
    body = (shared_fixtures / "jaeger" / "jaeger_apiv3_GetTrace.json").read_bytes()
    state = FakeJaeger(base_url="", reply=Reply(200, body))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            state.requests.append((url.path, parse_qs(url.query), dict(self.headers)))
            reply = state.reply
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            if reply.chunks is None:
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in [*reply.chunks, b""]:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep test output clean

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.base_url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_reads_the_fixture_and_sends_the_find_traces_query(
    jaeger: FakeJaeger, shared_fixtures: Path
) -> None:
    before = datetime.now(UTC)
    spans = read_jaeger_api(jaeger.base_url, "rag-gateway", SINCE_SECONDS, limit=25)
    after = datetime.now(UTC)

    assert spans == read_traces(shared_fixtures / "jaeger" / "jaeger_apiv3_GetTrace.json")
    assert spans[0].name == "foobar"
    ((path, query, _headers),) = jaeger.requests
    assert path == "/api/v3/traces"
    for canonical, older in [
        ("query.serviceName", "query.service_name"),
        ("query.startTimeMin", "query.start_time_min"),
        ("query.startTimeMax", "query.start_time_max"),
        ("query.searchDepth", "query.search_depth"),
        ("query.rawTraces", "query.raw_traces"),
    ]:
        assert query[canonical] == query[older], canonical
        assert len(query[canonical]) == 1, canonical
    assert query["query.serviceName"] == ["rag-gateway"]
    assert query["query.searchDepth"] == query["query.num_traces"] == ["25"]  # v2.12's name
    assert query["query.rawTraces"] == ["true"]
    start_min = datetime.fromisoformat(query["query.startTimeMin"][0])
    start_max = datetime.fromisoformat(query["query.startTimeMax"][0])
    assert query["query.startTimeMax"][0].endswith("Z")  # RFC 3339 in UTC
    assert before <= start_max <= after
    assert (start_max - start_min).total_seconds() == pytest.approx(SINCE_SECONDS)


@pytest.mark.parametrize("suffix", ["/", "/api/v3", "/api/v3/traces"])
def test_base_url_forms(jaeger: FakeJaeger, suffix: str) -> None:
    assert read_jaeger_api(jaeger.base_url + suffix, "svc", 60)
    assert jaeger.requests[-1][0] == "/api/v3/traces"


def test_injected_client_is_used_and_left_open(jaeger: FakeJaeger) -> None:
    with httpx.Client(headers={"x-probe": "yes"}) as client:
        assert read_jaeger_api(jaeger.base_url, "svc", 60, client=client)
        assert not client.is_closed
    assert jaeger.requests[0][2]["x-probe"] == "yes"


def test_streamed_chunks_are_all_read(jaeger: FakeJaeger) -> None:
    chunk = jaeger.reply.body
    second = chunk.replace(b"0000000000000002", b"0000000000000003")
    jaeger.reply = Reply(200, b"", chunks=[chunk, b"\n", second])
    spans = read_jaeger_api(jaeger.base_url, "svc", 60)
    assert [s.span_id for s in spans] == ["0000000000000002", "0000000000000003"]


def test_no_traces_found_is_an_empty_list(jaeger: FakeJaeger) -> None:
    # what Jaeger's gateway writes (through http.Error, hence text/plain)
    body = b'{"error":{"httpCode":404,"message":"No traces found"}}\n'
    jaeger.reply = Reply(404, body, "text/plain; charset=utf-8")
    assert read_jaeger_api(jaeger.base_url, "svc", 60) == []


def test_a_404_that_is_not_jaegers_names_the_url(jaeger: FakeJaeger) -> None:
    jaeger.reply = Reply(404, b"404 page not found\n", "text/plain")
    with pytest.raises(TraceReadError) as caught:
        read_jaeger_api(jaeger.base_url, "svc", 60)
    assert caught.value.source == f"{jaeger.base_url}/api/v3/traces"
    assert "HTTP 404: 404 page not found" in str(caught.value)


def test_server_error_message_is_reported(jaeger: FakeJaeger) -> None:
    body = b'{"error":{"httpCode":400,"message":"malformed parameter query.startTimeMin"}}'
    jaeger.reply = Reply(400, body, "text/plain")
    with pytest.raises(TraceReadError, match=r"/api/v3/traces: .*HTTP 400: malformed parameter"):
        read_jaeger_api(jaeger.base_url, "svc", 60)


def test_garbage_body_names_the_url(jaeger: FakeJaeger) -> None:
    jaeger.reply = Reply(200, b"<html>proxy login</html>", "text/html")
    with pytest.raises(TraceReadError) as caught:
        read_jaeger_api(jaeger.base_url, "svc", 60)
    assert caught.value.source == f"{jaeger.base_url}/api/v3/traces"
    assert "not a recognised trace format" in caught.value.message


def test_connection_refused_names_the_url() -> None:
    port = free_port()
    # the port was free a moment ago and nothing listens on it now
    with pytest.raises(TraceReadError) as caught:
        read_jaeger_api(f"http://127.0.0.1:{port}", "svc", 60)
    assert caught.value.source == f"http://127.0.0.1:{port}/api/v3/traces"
    assert "cannot query Jaeger" in caught.value.message


def test_non_positive_window_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="positive"):
        read_jaeger_api("http://127.0.0.1:1", "svc", 0)


@pytest.mark.parametrize("base_url", ["127.0.0.1:16686", "http://[::1"])
def test_unusable_url_names_the_url(base_url: str) -> None:
    with pytest.raises(TraceReadError, match="cannot query Jaeger") as caught:
        read_jaeger_api(base_url, "svc", 60)
    assert caught.value.source == f"{base_url}/api/v3/traces"
