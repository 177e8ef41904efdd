"""OTLP/gRPC: `opentelemetry.proto.collector.trace.v1.TraceService/Export`, beside OTLP/HTTP.

What every OpenTelemetry Collector's `otlp` and `load_balancing` exporters and many SDKs
speak by default (port 4317). Built on grpcio's asyncio server and the service name the
generated stubs of opentelemetry-proto define; the handler runs when a call's headers are
in, before its message, and takes the message's bytes undecoded, so that the checks run
in the order of their costs, as on OTLP/HTTP (`http.py`): the receiver token
(`authorization: Bearer` metadata), the deadline, admission before the message is read
(room for a message of the size the calls here have had: a refusal costs neither its
bytes nor a parse), admission from the message's own size, then the decode
(`receiver.Intake.receive`, on the intake's decoder threads for large messages). grpcio
itself enforces the largest message (`RESOURCE_EXHAUSTED`) and undoes `grpc-encoding: gzip`.

Refusals follow the OTLP specification: a full queue is `UNAVAILABLE` with `RetryInfo`
(the exporters back off that long; a caller back sooner is held until then, or until its
message fits: `admission.Throttle`); a message of more spans than the queue could ever
hold `RESOURCE_EXHAUSTED` without it (never retried); a malformed one `INVALID_ARGUMENT`;
spans refused out of an accepted message are the answer's `partial_success`.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import NoReturn

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from spanbudget.common.serving import parse_listen

from .otlp import PROTOBUF, QUEUE_FULL, Batch, IntakeError, rejection_message
from .receiver import Intake

__all__ = ["EXPORT_METHOD", "SERVICE", "TRANSPORT", "GrpcIntake", "GrpcTls"]

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"  # trace_service_pb2_grpc's
EXPORT_METHOD = f"/{SERVICE}/Export"
TRANSPORT = "grpc"  # the label of this transport's requests and spans in the metrics
# An IntakeError's HTTP status as the gRPC code OTLP/gRPC answers with.
_CODES = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    503: code_pb2.UNAVAILABLE,
}
# Messages up to this size decode in well under a millisecond on the event loop.
_INLINE_BYTES = 64 * 1024
_WEIGHT = 0.1  # of each new message in the moving average of their sizes


class GrpcTls:
    """A server certificate chain and its private key, PEM, for a TLS listener."""

    def __init__(self, certificate: Path, key: Path) -> None:
        self.certificate = certificate
        self.key = key

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key.read_bytes(), self.certificate.read_bytes())])


class GrpcIntake:
    """The OTLP/gRPC listener of one collector's intake; `start` and `stop` it on the event
    loop that serves the rest (the HTTP app's lifespan does)."""

    def __init__(
        self, intake: Intake, listen: str, *, tls: GrpcTls | None = None, required: bool = True
    ) -> None:
        self.intake = intake
        self.listen = listen
        self.tls = tls
        self.required = required  # False: a port taken is a warning, not a failed start
        self.port: int | None = None  # bound, once started (a port 0 given is chosen then)
        self._server: grpc.aio.Server | None = None
        self._message_bytes = 0.0  # the size of the messages here (a moving average)

    @property
    def address(self) -> str:
        host, _ = parse_listen(self.listen)
        return f"{host}:{self.port}" if ":" not in host else f"[{host}]:{self.port}"

    async def start(self) -> None:
        """Bind and serve; raises RuntimeError naming the address when it cannot bind."""
        limit = self.intake.settings.max_body_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", 1024 * 1024),
                ("grpc.so_reuseport", 0),  # a second collector on the port fails, not shares
            ],
        )
        # A streaming handler, on the wire the same as a unary one (a unary client's call is
        # a stream of one message): it runs when the call's headers are in, before its
        # message, so that admission can refuse it unread. No deserializer: the message's
        # bytes as they came, decoded only once admitted.
        handler = grpc.stream_unary_rpc_method_handler(
            self._export, request_deserializer=None, response_serializer=None
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),)
        )
        host, port = parse_listen(self.listen)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            if self.tls is None:
                bound = server.add_insecure_port(address)
            else:
                bound = server.add_secure_port(address, self.tls.credentials())
        except RuntimeError as exc:
            raise RuntimeError(f"OTLP/gRPC cannot listen on {address}: {exc}") from None
        if not bound:
            raise RuntimeError(f"OTLP/gRPC cannot listen on {address}: address in use?")
        await server.start()
        self._server, self.port = server, bound

    async def stop(self, grace: float = 5.0) -> None:
        """Refuse new calls, let the ones under way finish for up to `grace` seconds."""
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None

    @property
    def serving(self) -> bool:
        return self._server is not None

    async def _export(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> bytes:
        intake = self.intake
        settings = intake.settings
        token = settings.receiver_token
        if token is not None and not _authorized(context, token):
            error = IntakeError(401, "unauthorized", "missing or wrong bearer token")
            await self._refuse(context, error)
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            await self._refuse(context, IntakeError(504, "deadline", "the deadline had passed"))
        admission = intake.admission
        # Before the message is read, room for one of the size messages here have had: a
        # refusal now costs neither the message's bytes nor a parse. A sender back before
        # its RetryInfo is over waits for room until it is (`Throttle`).
        held = await intake.throttle.admit(
            _sender(context),
            functools.partial(admission.admit, round(self._message_bytes), compressed=False),
            None if remaining is None else remaining / 2,
        )
        if held is None:
            await self._refuse(context, IntakeError(503, "queue_full", QUEUE_FULL))
        try:
            request = await context.read()
        finally:
            admission.settle(held)
        if not isinstance(request, bytes) or await context.read() is not grpc.aio.EOF:
            error = IntakeError(400, "malformed", "send one ExportTraceServiceRequest a call")
            await self._refuse(context, error)
        seen = self._message_bytes
        self._message_bytes = seen + _WEIGHT * (len(request) - seen) if seen else len(request)
        reserved = admission.admit(len(request), compressed=False)
        if reserved is None:
            await self._refuse(context, IntakeError(503, "queue_full", QUEUE_FULL))
        batch: Batch | None = None
        try:
            receive = functools.partial(
                intake.receive, request, content_type=PROTOBUF, content_encoding=None
            )
            if len(request) <= _INLINE_BYTES:
                batch = receive()
            else:
                loop = asyncio.get_running_loop()
                batch = await loop.run_in_executor(intake.decoders, receive)
        except IntakeError as exc:
            await self._refuse(context, exc)
        finally:
            spans = len(batch.spans) + batch.rejected if batch is not None else 0
            admission.settle(reserved, len(request), spans)
        assert batch is not None  # every other way out refused above
        metrics = intake.metrics
        metrics.intake_requests.labels(TRANSPORT, "accepted").inc()
        metrics.intake_spans.labels(TRANSPORT).inc(len(batch.spans))
        response = ExportTraceServiceResponse()
        if batch.rejected:
            response.partial_success.rejected_spans = batch.rejected
            response.partial_success.error_message = rejection_message(
                batch, settings.max_span_bytes, intake.max_spans_per_trace
            )
        return response.SerializeToString()  # type: ignore[no-any-return]

    async def _refuse(self, context: grpc.aio.ServicerContext, error: IntakeError) -> NoReturn:
        """Answer the call with `error` as OTLP/gRPC's status (never returns)."""
        metrics = self.intake.metrics
        metrics.requests_rejected.labels(error.reason).inc()
        metrics.intake_requests.labels(TRANSPORT, error.reason).inc()
        code = _CODES.get(error.status, code_pb2.DEADLINE_EXCEEDED)
        status = status_pb2.Status(code=code, message=error.message)
        if error.status == 503:  # throttled: when to try again, as the exporters read it
            self.intake.throttle.told(_sender(context))
            delay = duration_pb2.Duration(seconds=self.intake.settings.retry_after_seconds)
            detail = any_pb2.Any()
            detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
            status.details.append(detail)
        await context.abort_with_status(rpc_status.to_status(status))
        raise AssertionError("abort_with_status returned")  # it raises, ending the call


def _sender(context: grpc.aio.ServicerContext) -> str:
    """The caller's address without its port (`ipv4:10.0.0.7`), as the throttle knows it."""
    return str(context.peer()).rpartition(":")[0]


def _authorized(context: grpc.aio.ServicerContext, token: str) -> bool:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            scheme, _, given = text.partition(" ")
            return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)
    return False
