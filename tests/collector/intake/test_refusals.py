"""A refusal costs the collector neither the body's bytes nor a parse: over OTLP/HTTP a
full queue is answered 503 from the headers alone and the connection is closed, not kept
by reading the rest of the body; over OTLP/gRPC the call is refused before its message is
read. And a sender that comes back before its Retry-After is over is held, not answered at
once: refused when its wait is over, or taken as soon as there is room."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from prometheus_client import CollectorRegistry
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.intake.grpc_server import EXPORT_METHOD
from spanbudget.collector.live.app import app_for
from spanbudget.collector.live.pipeline import Pipeline, assemble
from spanbudget.collector.live.settings import CollectorSettings

from tests.support.collector import BUDGET
from tests.support.otlp import to_request
from tests.support.servers import ServerThread
from tests.support.traces import rag_trace

PROTOBUF = "application/x-protobuf"
GARBAGE = b"\xff" * 50_000  # not OTLP: decoding it would be a 400 / INVALID_ARGUMENT
ONE_TRACE = to_request(rag_trace(trace_id="cd" * 16).spans).SerializeToString()


@dataclass
class Full:
    """A collector whose intake queue holds one trace and is full: its worker is not
    started (`start` starts it), so nothing drains the queue."""

    pipeline: Pipeline
    registry: CollectorRegistry
    url: str
    started: bool = False

    @property
    def port(self) -> int:
        return int(self.url.rpartition(":")[2])

    @property
    def grpc_address(self) -> str:
        assert self.pipeline.grpc is not None
        return self.pipeline.grpc.address

    def start(self) -> None:
        self.pipeline.start()
        self.started = True

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


@contextmanager
def full_collector(tmp_path: Path, retry_after_seconds: int = 1) -> Iterator[Full]:
    settings = CollectorSettings.from_flat(
        db_path=tmp_path / "v.db",
        budget_path=BUDGET,
        grpc_listen="127.0.0.1:0",
        intake_queue_spans=len(rag_trace().spans),
        retry_after_seconds=retry_after_seconds,
        body_timeout_seconds=30,
        decision_wait_seconds=0.2,
    )
    registry = CollectorRegistry()
    pipeline = assemble(settings, load_budget(BUDGET).budget, registry=registry, alerts=False)
    full = Full(pipeline, registry, "")
    try:
        with ServerThread(app_for(pipeline), lifespan="on") as server:
            first = to_request(rag_trace(trace_id="ab" * 16).spans).SerializeToString()
            response = httpx.post(
                f"{server.url}/v1/traces", content=first, headers={"Content-Type": PROTOBUF}
            )
            assert response.status_code == 200  # the queue is full now
            full.url = server.url
            yield full
    finally:
        if full.started:
            pipeline.close()
        else:
            pipeline.store.close()


def retry_delay_s(error: grpc.RpcError) -> float:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    info = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(info)
    return info.retry_delay.seconds + info.retry_delay.nanos / 1e9


@pytest.mark.timing
def test_a_full_queue_answers_from_the_headers_and_closes_without_reading_the_body(
    tmp_path: Path,
) -> None:
    """The client sends its headers and never its body: the 503 comes at once, and the
    server then closes the connection rather than wait for a body to read and discard."""
    with full_collector(tmp_path, retry_after_seconds=2) as full:
        head = (
            b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-protobuf\r\nContent-Length: 1000000\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", full.port)) as sock:
            sock.settimeout(5)
            started = time.monotonic()
            sock.sendall(head)
            answer = b""
            while chunk := sock.recv(65536):  # to the server's close: b"" is its FIN
                answer += chunk
            waited = time.monotonic() - started
        assert waited < 2  # not the body timeout (30 s), nor any wait for the body
        status, _, rest = answer.partition(b"\r\n")
        headers = rest.partition(b"\r\n\r\n")[0].lower().split(b"\r\n")
        assert status.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"retry-after: 2" in headers
        assert b"connection: close" in headers
        assert (
            full.metric("spanbudget_intake_requests_total", transport="http", outcome="queue_full")
            == 1
        )


def test_a_refused_http_body_is_not_parsed(tmp_path: Path) -> None:
    with full_collector(tmp_path) as full:
        response = httpx.post(
            f"{full.url}/v1/traces", content=GARBAGE, headers={"Content-Type": PROTOBUF}
        )
        assert response.status_code == 503  # not 400: never decoded
        assert response.headers["retry-after"] == "1"
        assert response.headers["connection"] == "close"
        assert full.metric("spanbudget_requests_rejected_total", reason="queue_full") == 1
        assert full.metric("spanbudget_requests_rejected_total", reason="malformed") == 0


def test_a_refused_grpc_message_is_not_parsed(tmp_path: Path) -> None:
    with full_collector(tmp_path) as full, grpc.insecure_channel(full.grpc_address) as channel:
        export = channel.unary_unary(EXPORT_METHOD)  # bytes as they are: no serializer
        with pytest.raises(grpc.RpcError) as refused:
            export(GARBAGE, timeout=10)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE  # not INVALID_ARGUMENT
        assert retry_delay_s(refused.value) == 1
        assert (
            full.metric("spanbudget_intake_requests_total", transport="grpc", outcome="queue_full")
            == 1
        )
        assert full.metric("spanbudget_requests_rejected_total", reason="malformed") == 0


@pytest.mark.timing
def test_a_grpc_call_is_refused_before_its_message_comes(tmp_path: Path) -> None:
    """The call's headers are in, its message never comes: with the queue full, it is
    refused at once all the same (the handler runs before the message is read)."""
    never = threading.Event()

    def no_message() -> Iterator[bytes]:
        never.wait(30)
        return
        yield b""  # a generator that yields nothing until released

    with full_collector(tmp_path) as full, grpc.insecure_channel(full.grpc_address) as channel:
        export = channel.stream_unary(EXPORT_METHOD)
        started = time.monotonic()
        try:
            with pytest.raises(grpc.RpcError) as refused:
                export(no_message(), timeout=10)
        finally:
            never.set()
        assert time.monotonic() - started < 2  # not the call's 10 s deadline
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        assert retry_delay_s(refused.value) == 1


@pytest.mark.timing
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_sender_back_too_soon_waits_its_retry_after_or_for_room(
    tmp_path: Path, transport: str
) -> None:
    """Refused once and back at once: held, and refused only when its Retry-After is over
    (one refusal a Retry-After, however fast it asks); held again, and taken as soon as
    the queue has room, before the wait is over."""
    with full_collector(tmp_path, retry_after_seconds=1) as full:
        if transport == "http":
            client = httpx.Client(base_url=full.url, timeout=10)

            def send() -> bool:
                response = client.post(
                    "/v1/traces", content=ONE_TRACE, headers={"Content-Type": PROTOBUF}
                )
                assert response.status_code in (200, 503)
                return response.status_code == 200
        else:
            channel = grpc.insecure_channel(full.grpc_address)
            export = channel.unary_unary(EXPORT_METHOD)

            def send() -> bool:
                try:
                    export(ONE_TRACE, timeout=10)
                except grpc.RpcError as exc:
                    code = exc.code()
                else:
                    return True
                assert code is grpc.StatusCode.UNAVAILABLE
                return False

        def timed() -> tuple[bool, float]:
            started = time.monotonic()
            return send(), time.monotonic() - started

        try:
            refused, at_once = timed()
            assert not refused
            assert at_once < 0.5
            refused, held = timed()  # back at once: answered when its second is over
            assert not refused
            assert 0.8 <= held < 1.5
            threading.Timer(0.3, full.start).start()  # the worker starts: room in a moment
            accepted, held = timed()
            assert accepted
            assert 0.2 <= held < 0.9  # taken when room appeared, not after the whole second
        finally:
            client.close() if transport == "http" else channel.close()
        refusals = full.metric(
            "spanbudget_intake_requests_total", transport=transport, outcome="queue_full"
        )
        assert refusals == 2
