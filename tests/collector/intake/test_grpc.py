"""OTLP/gRPC intake (`TraceService/Export`), held to what OTLP/HTTP guarantees: the same
verdicts; gzip; the largest message; admission and the OTLP specification's throttling
(UNAVAILABLE with RetryInfo); partial success; the receiver token; TLS; malformed
messages; deadlines; the journal across `kill -9`; /healthz and /metrics by transport.
The clients are real: grpcio's stub over the generated service, and the OpenTelemetry
SDK's gRPC exporter."""

from __future__ import annotations

import gzip
import signal
import subprocess
import time
from pathlib import Path

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.live.app import app_for
from spanbudget.collector.live.pipeline import assemble
from spanbudget.collector.live.settings import CollectorSettings

from tests.deploy.processes import spanbudget_command, start_process, stop_process
from tests.support.collector import BUDGET, running_collector
from tests.support.otlp import to_request
from tests.support.servers import ServerThread, free_port, wait_until
from tests.support.traces import rag_trace

FREE = "127.0.0.1:0"


def stub(address: str, **channel: object) -> TraceServiceStub:
    return TraceServiceStub(grpc.insecure_channel(address, **channel))  # type: ignore[arg-type]


def export(address: str, request: ExportTraceServiceRequest, **call: object) -> bytes:
    response = stub(address).Export(request, **{"timeout": 10, **call})
    return bytes(response.SerializeToString())


def comparable(verdict: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in verdict.items() if k not in ("evaluated_at", "trace_id")}


def test_the_same_traces_get_the_same_verdicts_as_over_http(tmp_path: Path) -> None:
    traces = [rag_trace(trace_id=f"{0xC0 << 120 | i:032x}", retrieval=i * 5) for i in range(6)]
    with running_collector(tmp_path, grpc_listen=FREE) as collector:
        for i, trace in enumerate(traces):
            request = to_request(trace.spans)
            if i % 2:  # half over HTTP, half over gRPC: the two must agree
                assert collector.post(
                    request.SerializeToString(), "application/x-protobuf"
                ).is_success
            else:
                assert (
                    ExportTraceServiceResponse.FromString(export(collector.grpc_address, request))
                    == ExportTraceServiceResponse()
                )
        verdicts = [collector.verdict(t.trace_id) for t in traces]
        assert (
            collector.metric(
                "spanbudget_intake_requests_total", transport="grpc", outcome="accepted"
            )
            == 3
        )
        assert collector.metric("spanbudget_intake_spans_total", transport="grpc") == 3 * len(
            traces[0].spans
        )
        assert collector.metric("spanbudget_intake_spans_total", transport="http") == 3 * len(
            traces[0].spans
        )
        health = collector.client.get("/healthz").json()
    assert health["listeners"] == {"http": "serving", "grpc": "serving"}
    # retrieval 0, 5, 10, ... over each transport in turn: as the other transport judges it
    again = [rag_trace(trace_id=t.trace_id, retrieval=i * 5) for i, t in enumerate(traces)]
    with running_collector(tmp_path / "http") as collector:
        for trace in again:
            collector.post(to_request(trace.spans).SerializeToString(), "application/x-protobuf")
        over_http = [collector.verdict(t.trace_id) for t in again]
    assert [comparable(v) for v in verdicts] == [comparable(v) for v in over_http]


def test_the_sdks_grpc_exporter_gzip_and_a_token(tmp_path: Path) -> None:
    with running_collector(tmp_path, grpc_listen=FREE, receiver_token="s3cret") as collector:
        collector.client.headers["Authorization"] = "Bearer s3cret"  # the API asks for it too
        address = collector.grpc_address
        request = to_request(rag_trace(trace_id="c1" * 16).spans)
        with pytest.raises(grpc.RpcError) as refused:
            export(address, request)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as wrong:
            export(address, request, metadata=(("authorization", "Bearer nope"),))
        assert wrong.value.code() is grpc.StatusCode.UNAUTHENTICATED
        ok = stub(address, compression=grpc.Compression.Gzip).Export(
            request, timeout=10, metadata=(("authorization", "Bearer s3cret"),)
        )
        assert isinstance(ok, ExportTraceServiceResponse)
        assert collector.verdict("c1" * 16)["status"] == "ok"
        # The SDK's own exporter, gzip on, as an app configured with
        # OTEL_EXPORTER_OTLP_PROTOCOL=grpc sends.
        exporter = OTLPSpanExporter(
            endpoint=address,
            insecure=True,
            headers={"authorization": "Bearer s3cret"},
            compression=grpc.Compression.Gzip,
        )
        provider = TracerProvider(resource=Resource.create({"service.name": "rag-gateway"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("tests")
        chat_attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.stream": True,
            "gen_ai.response.time_to_first_chunk": 0.002,
        }
        with (
            tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER),
            tracer.start_as_current_span(
                "chat m", kind=SpanKind.CLIENT, attributes=chat_attributes
            ) as chat,
        ):
            time.sleep(0.005)
        trace_id = format(chat.get_span_context().trace_id, "032x")
        provider.shutdown()
        verdict = collector.verdict(trace_id)
        assert verdict["ttft_ms"] is not None
        assert collector.metric("spanbudget_requests_rejected_total", reason="unauthorized") == 2


def test_refusals_follow_the_otlp_specification(tmp_path: Path) -> None:
    with running_collector(
        tmp_path,
        grpc_listen=FREE,
        max_body_bytes=64 * 1024,
        max_span_bytes=2 * 1024,
        intake_queue_spans=40,
        max_spans_per_trace=30,
    ) as collector:
        address = collector.grpc_address
        # Malformed: INVALID_ARGUMENT, never retried; the collector carries on.
        with pytest.raises(grpc.RpcError) as malformed:
            grpc.insecure_channel(address).unary_unary(
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
            )(b"\xff\xff not protobuf", timeout=10)
        assert malformed.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        # Over the largest message: RESOURCE_EXHAUSTED, from grpcio itself.
        big = rag_trace(trace_id="c2" * 16)
        huge = to_request(big.spans)
        huge.resource_spans[0].scope_spans[0].spans[0].name = "x" * (70 * 1024)
        with pytest.raises(grpc.RpcError) as too_large:
            export(address, huge)
        assert too_large.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        # Compressed, the bound holds after decompression (a zip bomb is no way round it).
        with pytest.raises(grpc.RpcError) as bomb:
            stub(address, compression=grpc.Compression.Gzip).Export(huge, timeout=10)
        assert bomb.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert len(gzip.compress(huge.SerializeToString())) < 64 * 1024
        # Spans refused out of an accepted message: partial success, the rest judged.
        oversized = to_request(rag_trace(trace_id="c3" * 16).spans)
        oversized.resource_spans[0].scope_spans[0].spans[-1].name = "y" * 3000
        answer = ExportTraceServiceResponse.FromString(export(address, oversized))
        assert answer.partial_success.rejected_spans == 1
        assert "over 2048 bytes" in answer.partial_success.error_message
        # More spans than the queue could ever hold: RESOURCE_EXHAUSTED without RetryInfo
        # (asked once the worker took the message before: with spans queued, a message that
        # does not fit is "queue full", UNAVAILABLE, as it should be).
        core = collector.pipeline.core
        wait_until(lambda: core.queued() == 0, "the queue taken", 10)
        many = [s for i in range(5) for s in rag_trace(trace_id=f"{0xC4 << 120 | i:032x}").spans]
        with pytest.raises(grpc.RpcError) as never:
            export(address, to_request(many))
        assert never.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert not _retry_info(never.value)
        assert collector.client.get("/healthz").status_code == 200


def test_a_deadline_that_passes_while_waiting_leaves_the_message_untaken(
    tmp_path: Path,
) -> None:
    with running_collector(tmp_path, grpc_listen=FREE) as collector:
        address = collector.grpc_address
        # A deadline passed while the message waits for a decoder: the call ends there,
        # and the message is never decoded nor its spans taken.
        decoders = collector.pipeline.intake.decoders
        held = [decoders.submit(time.sleep, 1.5) for _ in range(2)]  # every decoder busy
        padded = to_request(rag_trace(trace_id="c5" * 16).spans)
        padded.resource_spans[0].scope_spans[0].spans[0].attributes.add(
            key="pad", value={"string_value": "z" * 1500}
        )
        for _ in range(60):  # over 64 KiB: decoded off the event loop
            padded.resource_spans[0].scope_spans[0].spans.add().CopyFrom(
                padded.resource_spans[0].scope_spans[0].spans[0]
            )
        with pytest.raises(grpc.RpcError) as late:
            export(address, padded, timeout=0.3)
        assert late.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        for future in held:
            future.result()
        time.sleep(0.5)  # the decision wait, had anything been taken
        assert collector.client.get(f"/api/verdicts/{'c5' * 16}").status_code == 404


def test_a_full_queue_is_unavailable_with_retry_info(tmp_path: Path) -> None:
    """Nothing drains the queue (the worker is not started): it fills, and a further
    export is throttled the way the Collector's exporter backs off on (retry_on_failure
    reads RetryInfo)."""
    settings = CollectorSettings.from_flat(
        db_path=tmp_path / "v.db",
        budget_path=BUDGET,
        grpc_listen=FREE,
        intake_queue_spans=3 * len(rag_trace().spans),
        retry_after_seconds=3,
    )
    registry = CollectorRegistry()
    pipeline = assemble(settings, load_budget(BUDGET).budget, registry=registry, alerts=False)
    try:
        with ServerThread(app_for(pipeline), lifespan="on"):
            assert pipeline.grpc is not None
            address = pipeline.grpc.address
            codes = []
            for i in range(4):  # one refused: a second this soon would be held 3 s
                request = to_request(rag_trace(trace_id=f"{0xC6 << 120 | i:032x}").spans)
                try:
                    export(address, request)
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as exc:
                    codes.append(exc.code())
                    last = exc
    finally:
        pipeline.store.close()
    assert codes[:3] == [grpc.StatusCode.OK] * 3
    assert codes[3:] == [grpc.StatusCode.UNAVAILABLE]
    info = _retry_info(last)
    assert info is not None
    assert info.retry_delay.seconds == 3
    throttled = {"transport": "grpc", "outcome": "queue_full"}
    assert registry.get_sample_value("spanbudget_intake_requests_total", throttled) == 1


def _retry_info(error: grpc.RpcError) -> error_details_pb2.RetryInfo | None:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info
    return None


def test_tls_with_a_certificate_and_key(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    with running_collector(
        tmp_path, grpc_listen=FREE, grpc_tls_cert=cert, grpc_tls_key=key
    ) as collector:
        address = collector.grpc_address
        channel = grpc.secure_channel(
            address, grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        )
        request = to_request(rag_trace(trace_id="c7" * 16).spans)
        assert isinstance(
            TraceServiceStub(channel).Export(request, timeout=10), ExportTraceServiceResponse
        )
        assert collector.verdict("c7" * 16)["status"] == "ok"
        with pytest.raises(grpc.RpcError) as plain:
            export(address, request)  # a plaintext client gets nowhere
        assert plain.value.code() is grpc.StatusCode.UNAVAILABLE


def test_what_grpc_acknowledged_survives_kill_9(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each trace's children, then its root in a later message; killed mid-stream, started
    again on the same files: every acknowledged trace judged once, whole."""
    monkeypatch.setenv("SPANBUDGET_COLLECTOR_REPLAY_WAIT_SECONDS", "1")  # roots sent at once
    port, grpc_port = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    command = spanbudget_command(
        "collect",
        *("--listen", f"127.0.0.1:{port}", "--grpc-listen", f"127.0.0.1:{grpc_port}"),
        *("--db", str(tmp_path / "verdicts.db")),
    )
    ids = [f"{0xC8 << 120 | i:032x}" for i in range(40)]
    first = start_process(command, f"{url}/healthz", tmp_path / "first.log")
    address = f"127.0.0.1:{grpc_port}"
    for trace_id in ids:
        export(address, to_request(rag_trace(trace_id=trace_id).spans[1:]))
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    second = start_process(command, f"{url}/healthz", tmp_path / "second.log")
    try:
        for trace_id in ids:  # the roots the client still had
            export(address, to_request(rag_trace(trace_id=trace_id).spans[:1]))
        time.sleep(3.5)  # past the decision wait
        with httpx.Client(base_url=url, timeout=10) as client:
            verdicts = {
                v["trace_id"]: v for v in client.get("/api/verdicts", params={"limit": 1000}).json()
            }
    finally:
        stop_process(second)
    per_trace = len(rag_trace().spans)
    assert sorted(verdicts) == sorted(ids)
    assert {v["spans"] for v in verdicts.values()} == {per_trace}
