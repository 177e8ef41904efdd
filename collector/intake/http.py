"""OTLP/HTTP: `POST /v1/traces` (DESIGN §7), protobuf or JSON, gzip, answered in kind.

The order of the checks is the order of their costs: the receiver token, then admission
from the declared length (a refusal reads no body and parses nothing, and closes the
connection rather than read the body to keep it; a sender back before its Retry-After is
over is held until then, or until its body fits: `admission.Throttle`), then the body read
within its size and time limits, then the decode (`receiver.Intake.receive`), on the event
loop for small plain bodies and on the intake's decoder threads for the rest.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging

from fastapi import APIRouter, Request, Response
from spanbudget.common.serving import BodyAborted, BodyTimeout, BodyTooLarge, read_body

from .otlp import (
    JSON,
    PROTOBUF,
    QUEUE_FULL,
    IntakeError,
    encode_response,
    encode_status,
    is_json,
    rejection_message,
)
from .receiver import Intake

__all__ = ["TRACES_PATH", "otlp_router"]

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
TRANSPORT = "http"  # the label of this transport's requests and spans in the metrics
# google.rpc.Code values for the Status body of OTLP/HTTP errors.
_RPC_CODES = {400: 3, 401: 16, 408: 4, 413: 3, 415: 3, 503: 14}
# Plain bodies up to this size decode in well under a millisecond: on the event loop, as
# handing them to a decoder thread would cost more. Larger or compressed ones go there.
_INLINE_BYTES = 64 * 1024
# On an answer given before the body was read: the server closes the connection once the
# answer is out, instead of reading the rest of the body to keep the connection (for a
# refused 1 MB body, reading it was most of what the refusal cost).
_CLOSE = {"Connection": "close"}


def otlp_router(intake: Intake) -> APIRouter:
    """`POST /v1/traces` into `intake`."""
    settings = intake.settings
    metrics = intake.metrics
    token = settings.receiver_token
    admission = intake.admission
    throttle = intake.throttle
    busy = IntakeError(503, "queue_full", QUEUE_FULL)
    retry_after = {"Retry-After": str(settings.retry_after_seconds)}
    refused_unread = {**retry_after, **_CLOSE}
    router = APIRouter()

    def refuse(
        error: IntakeError, as_json: bool, headers: dict[str, str] | None = None
    ) -> Response:
        metrics.requests_rejected.labels(error.reason).inc()
        metrics.intake_requests.labels(TRANSPORT, error.reason).inc()
        return Response(
            encode_status(_RPC_CODES.get(error.status, 2), error.message, as_json=as_json),
            status_code=error.status,
            media_type=JSON if as_json else PROTOBUF,
            headers=headers,
        )

    @router.post(TRACES_PATH)
    async def export_traces(request: Request) -> Response:
        content_type = request.headers.get("content-type")
        as_json = is_json(content_type)
        if token is not None and not _authorized(request.headers.get("authorization"), token):
            return refuse(
                IntakeError(401, "unauthorized", "missing or wrong bearer token"),
                as_json,
                {"WWW-Authenticate": "Bearer", **_CLOSE},
            )
        encoding = request.headers.get("content-encoding")
        declared = request.headers.get("content-length", "")
        sender = request.client.host if request.client else None
        # Admission first: a refusal costs neither reading nor decoding the body. A sender
        # back before its Retry-After is over waits for room until it is (`Throttle`).
        reserved = await throttle.admit(
            sender,
            functools.partial(
                admission.admit,
                int(declared) if declared.isdigit() else None,
                compressed=encoding not in (None, "identity"),
            ),
        )
        if reserved is None:
            throttle.told(sender)
            return refuse(busy, as_json, refused_unread)
        body = b""
        batch = None
        try:
            try:
                body = await _read_body(
                    request, settings.max_body_bytes, settings.body_timeout_seconds
                )
            except IntakeError as exc:  # 413 or 408: the rest of the body is not read either
                return refuse(exc, as_json, _CLOSE)
            receive = functools.partial(
                intake.receive, body, content_type=content_type, content_encoding=encoding
            )
            if len(body) <= _INLINE_BYTES and encoding in (None, "identity"):
                batch = receive()  # a small plain body: quicker decoded than handed over
            else:  # off the event loop: /healthz, the API and other uploads go on meanwhile
                batch = await asyncio.get_running_loop().run_in_executor(intake.decoders, receive)
        except IntakeError as exc:
            if exc.status != 503:
                return refuse(exc, as_json)
            throttle.told(sender)
            return refuse(exc, as_json, retry_after)
        finally:
            plain = encoding in (None, "identity")
            spans = len(batch.spans) + batch.rejected if batch is not None and plain else 0
            admission.settle(reserved, len(body), spans)
        message = rejection_message(batch, settings.max_span_bytes, intake.max_spans_per_trace)
        metrics.intake_requests.labels(TRANSPORT, "accepted").inc()
        metrics.intake_spans.labels(TRANSPORT).inc(len(batch.spans))
        return Response(
            encode_response(batch.rejected, message, as_json=as_json),
            media_type=JSON if as_json else PROTOBUF,
        )

    return router


def _authorized(header: str | None, token: str) -> bool:
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


async def _read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The raw body, refused as soon as it passes `limit` bytes (compressed or not) or
    when it is not all in after `timeout` seconds."""
    try:
        return await read_body(request, limit, timeout=timeout)
    except BodyTooLarge as exc:
        raise IntakeError(413, "too_large", str(exc)) from None
    except BodyTimeout as exc:
        raise IntakeError(408, "body_timeout", str(exc)) from None
    except BodyAborted as exc:
        log.info("upload from %s aborted: %s", _client(request), exc)
        raise IntakeError(400, "aborted", str(exc)) from None


def _client(request: Request) -> str:
    client = request.client
    return f"{client.host}:{client.port}" if client else "unknown client"
