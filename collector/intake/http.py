"""OTLP/HTTP: `POST /v1/traces` (DESIGN §7), protobuf or JSON, gzip, answered in kind.

The order of the checks is the order of their costs: the receiver token, then admission
from the declared length (a refusal reads no body and parses nothing, and closes the
connection rather than read the body to keep it; a sender back before its Retry-After is
over is held until then, or until its body fits: `admission.Throttle`), then the body read
within its size and time limits, then the decode (`receiver.Intake.receive`), on the event
loop for small plain bodies and on the intake's decoder threads for the rest.

`OtlpHttp` is plain ASGI middleware in front of the app's own: the collector's hottest
request skips the web framework's routing, request and response objects and the
middleware meant for pages (measured here on one-trace requests, the event loop's CPU a
request went from 487 µs through the framework to 377). It answers as the framework did
(405 to other methods); the app's `SecurityHeaders` in front of it adds `nosniff`.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from spanbudget.common.serving import BodyAborted, BodyTimeout, BodyTooLarge, receive_body

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

__all__ = ["TRACES_PATH", "OtlpHttp"]

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
_CLOSE = [(b"connection", b"close")]
_MEDIA = {False: PROTOBUF.encode(), True: JSON.encode()}

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# An answer: status, extra headers, body.
_Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


class OtlpHttp:
    """ASGI middleware: POST /v1/traces into `intake`; everything else to `app`."""

    def __init__(self, app: ASGIApp, intake: Intake) -> None:
        self.app = app
        self.intake = intake
        settings = intake.settings
        self._busy = IntakeError(503, "queue_full", QUEUE_FULL)
        self._retry_after = [(b"retry-after", str(settings.retry_after_seconds).encode())]
        self._token = settings.receiver_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != TRACES_PATH:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST":  # as the framework's router answers it
            answer: _Answer = (405, [(b"allow", b"POST")], b'{"detail":"Method Not Allowed"}')
            await _send(send, answer, b"application/json")
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.lower(), value)
        content_type = _text(headers.get(b"content-type"))
        as_json = is_json(content_type)
        answer = await self._export(headers, content_type, as_json, scope.get("client"), receive)
        await _send(send, answer, _MEDIA[as_json])

    async def _export(
        self,
        headers: dict[bytes, bytes],
        content_type: str | None,
        as_json: bool,
        client: tuple[str, int] | None,
        receive: Receive,
    ) -> _Answer:
        intake = self.intake
        settings = intake.settings
        if self._token is not None and not _authorized(
            _text(headers.get(b"authorization")), self._token
        ):
            return self._refuse(
                IntakeError(401, "unauthorized", "missing or wrong bearer token"),
                as_json,
                [(b"www-authenticate", b"Bearer"), *_CLOSE],
            )
        encoding = _text(headers.get(b"content-encoding"))
        declared = _text(headers.get(b"content-length")) or ""
        sender = client[0] if client else None
        # Admission first: a refusal costs neither reading nor decoding the body. A sender
        # back before its Retry-After is over waits for room until it is (`Throttle`).
        reserved = await intake.throttle.admit(
            sender,
            functools.partial(
                intake.admission.admit,
                int(declared) if declared.isdigit() else None,
                compressed=encoding not in (None, "identity"),
            ),
        )
        if reserved is None:
            intake.throttle.told(sender)
            return self._refuse(self._busy, as_json, [*self._retry_after, *_CLOSE])
        body = b""
        batch = None
        try:
            try:
                body = await _read_body(
                    receive,
                    declared or None,
                    settings.max_body_bytes,
                    settings.body_timeout_seconds,
                    client,
                )
            except IntakeError as exc:  # 413 or 408: the rest of the body is not read either
                return self._refuse(exc, as_json, _CLOSE)
            take = functools.partial(
                intake.receive, body, content_type=content_type, content_encoding=encoding
            )
            if len(body) <= _INLINE_BYTES and encoding in (None, "identity"):
                batch = take()  # a small plain body: quicker decoded than handed over
            else:  # off the event loop: /healthz, the API and other uploads go on meanwhile
                batch = await asyncio.get_running_loop().run_in_executor(intake.decoders, take)
        except IntakeError as exc:
            if exc.status != 503:
                return self._refuse(exc, as_json)
            intake.throttle.told(sender)
            return self._refuse(exc, as_json, self._retry_after)
        finally:
            plain = encoding in (None, "identity")
            spans = len(batch.spans) + batch.rejected if batch is not None and plain else 0
            intake.admission.settle(reserved, len(body), spans)
        message = rejection_message(batch, settings.max_span_bytes, intake.max_spans_per_trace)
        metrics = intake.metrics
        metrics.intake_requests.labels(TRANSPORT, "accepted").inc()
        metrics.intake_spans.labels(TRANSPORT).inc(len(batch.spans))
        return 200, [], encode_response(batch.rejected, message, as_json=as_json)

    def _refuse(
        self, error: IntakeError, as_json: bool, headers: list[tuple[bytes, bytes]] | None = None
    ) -> _Answer:
        metrics = self.intake.metrics
        metrics.requests_rejected.labels(error.reason).inc()
        metrics.intake_requests.labels(TRANSPORT, error.reason).inc()
        status = encode_status(_RPC_CODES.get(error.status, 2), error.message, as_json=as_json)
        return error.status, headers or [], status


async def _send(send: Send, answer: _Answer, media: bytes) -> None:
    status, extra, body = answer
    headers = [
        (b"content-length", str(len(body)).encode()),
        (b"content-type", media),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _text(value: bytes | None) -> str | None:
    """A header's value as the framework gives it (Latin-1), or None."""
    return None if value is None else value.decode("latin-1")


def _authorized(header: str | None, token: str) -> bool:
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


async def _read_body(
    receive: Receive,
    declared: str | None,
    limit: int,
    timeout: float,
    client: tuple[str, int] | None,
) -> bytes:
    """The raw body, refused as soon as it passes `limit` bytes (compressed or not) or
    when it is not all in after `timeout` seconds."""
    try:
        return await receive_body(receive, declared, limit, timeout=timeout)
    except BodyTooLarge as exc:
        raise IntakeError(413, "too_large", str(exc)) from None
    except BodyTimeout as exc:
        raise IntakeError(408, "body_timeout", str(exc)) from None
    except BodyAborted as exc:
        log.info("upload from %s aborted: %s", _client(client), exc)
        raise IntakeError(400, "aborted", str(exc)) from None


def _client(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "unknown client"
