"""OTLP/HTTP trace intake: body limits, gzip without bombs, protobuf/JSON decoding, responses.

Pure functions over bytes; the HTTP route in `api.py` calls them and enqueues the result.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field

from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ..core.held import HeldSpan, Origin
from ..errors import CollectorError
from ..readers import (
    TraceReadError,
    request_from_json,
    request_from_protobuf,
    spans_from_otlp,
)
from ..readers.span_records import SpanReader, untracked_each
from ..spans import Span

__all__ = [
    "QUEUE_FULL",
    "Batch",
    "IntakeError",
    "decode_export",
    "encode_response",
    "encode_status",
    "is_json",
    "rejection_message",
]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_SOURCE = "OTLP request"
QUEUE_FULL = "intake queue full, retry later"


class IntakeError(CollectorError):
    """A request the intake refuses: `status` is the HTTP status, `reason` the metric label."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(slots=True)
class Batch:
    """One accepted request: each span, with its OTLP original when asked for. `rejected`
    spans were refused at intake (too large) and are reported as partial success."""

    spans: list[HeldSpan]
    rejected: int = 0
    lost: dict[str, dict[str, int]] = field(default_factory=dict)  # trace id -> reason -> n


def is_json(content_type: str | None) -> bool:
    return (content_type or "").split(";", 1)[0].strip().lower() == JSON


def decode_export(
    body: bytes,
    *,
    content_type: str | None,
    content_encoding: str | None,
    max_body_bytes: int,
    max_span_bytes: int,
    originals: bool,
    reader: SpanReader | None = None,
) -> Batch:
    """Decode one `POST /v1/traces` body into a batch, or raise `IntakeError` (4xx).

    With `originals`, each span keeps its protobuf original (to forward it); without,
    the decoded request is let go at once: holding it costs the collector a few percent
    of its throughput, for nothing when nothing forwards. Protobuf bodies whose
    originals nobody keeps go through `reader` where it is the compiled wire reader:
    its records make the same spans, seven times as fast as the protobuf package's
    messages (bench/pipeline.py); a span over `max_span_bytes` is measured there by its
    encoding as it came (the protobuf package's `ByteSize` re-encodes what it parsed).
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in (PROTOBUF, JSON):
        raise IntakeError(
            415, "unsupported_media_type", f"Content-Type must be {PROTOBUF} or {JSON}"
        )
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "gzip":
        body = gunzip_bounded(body, max_body_bytes)
    elif encoding != "identity":
        raise IntakeError(415, "unsupported_encoding", "Content-Encoding must be gzip or absent")
    if len(body) > max_body_bytes:
        raise IntakeError(413, "too_large", f"body over {max_body_bytes} bytes")
    if not body:
        raise IntakeError(400, "malformed", "empty body: send an ExportTraceServiceRequest")
    if media == PROTOBUF and not originals and reader is not None and reader.compiled:
        return _decode_records(reader, body, max_span_bytes)
    try:
        request = request_from_protobuf(body, _SOURCE) if media == PROTOBUF else _from_json(body)
        lost = _drop_oversized(request, max_span_bytes) if len(body) > max_span_bytes else {}
        spans = spans_from_otlp(request, source=_SOURCE)
    except TraceReadError as exc:
        raise IntakeError(400, "malformed", str(exc)) from None
    rejected = sum(lost.values())
    if rejected and not spans:
        raise IntakeError(400, "span_too_large", f"every span is over {max_span_bytes} bytes")
    held = _held(request, spans) if originals else [HeldSpan(span) for span in spans]
    return Batch(held, rejected, {t: {"span_too_large": n} for t, n in lost.items()})


def _decode_records(reader: SpanReader, body: bytes, max_span_bytes: int) -> Batch:
    """`decode_export`'s protobuf body read by the compiled wire reader."""
    try:
        records = reader.read(body, _SOURCE)
    except TraceReadError as exc:
        raise IntakeError(400, "malformed", str(exc)) from None
    spans, lost = records.spans_within(max_span_bytes if len(body) > max_span_bytes else None)
    if lost and not spans:
        raise IntakeError(400, "span_too_large", f"every span is over {max_span_bytes} bytes")
    held = untracked_each(HeldSpan, spans)
    return Batch(held, sum(lost.values()), {t: {"span_too_large": n} for t, n in lost.items()})


# Real OTLP exporters send one gzip member; concatenated members are valid gzip, but a body
# of many empty ones costs a decompressor each while inflating to nothing.
MAX_GZIP_MEMBERS = 64
_GZIP_CHUNK = 64 * 1024


def gunzip_bounded(body: bytes, limit: int, *, max_members: int = MAX_GZIP_MEMBERS) -> bytes:
    """Inflate gzip but never past `limit` bytes (a bomb costs at most that) nor past
    `max_members` members; input is fed in chunks, so the work grows with the body and
    not faster (each member's leftover input is at most one chunk)."""
    out = bytearray()
    view = memoryview(body)
    members = 0
    inflater = None
    for start in range(0, len(view), _GZIP_CHUNK):
        pending: bytes | memoryview = view[start : start + _GZIP_CHUNK]
        while pending:
            if inflater is None:
                members += 1
                if members > max_members:
                    raise IntakeError(
                        400, "malformed", f"gzip body of more than {max_members} members"
                    )
                inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                out += inflater.decompress(pending, limit + 1 - len(out))
            except zlib.error as exc:
                raise IntakeError(400, "malformed", f"bad gzip body: {exc}") from None
            if len(out) > limit:
                raise IntakeError(413, "too_large", f"body over {limit} bytes after decompression")
            if inflater.eof:
                pending = inflater.unused_data
                inflater = None
            else:
                pending = b""
    if inflater is not None or members == 0:
        raise IntakeError(400, "malformed", "truncated gzip body")
    return bytes(out)


def _from_json(body: bytes) -> ExportTraceServiceRequest:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise TraceReadError(_SOURCE, f"not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise TraceReadError(_SOURCE, "expected a JSON object (an ExportTraceServiceRequest)")
    try:
        return request_from_json(document, _SOURCE)
    except RecursionError:
        raise TraceReadError(_SOURCE, "JSON nested too deeply") from None


def _drop_oversized(request: ExportTraceServiceRequest, max_span_bytes: int) -> dict[str, int]:
    """Remove spans whose encoding exceeds the limit (a 1 MB attribute); return how many
    each trace lost, by hex trace id."""
    dropped: dict[str, int] = {}
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            spans = scope_spans.spans
            for i in range(len(spans) - 1, -1, -1):
                if spans[i].ByteSize() > max_span_bytes:
                    trace_id = spans[i].trace_id.hex()
                    dropped[trace_id] = dropped.get(trace_id, 0) + 1
                    del spans[i]
    return dropped


def _held(request: ExportTraceServiceRequest, spans: list[Span]) -> list[HeldSpan]:
    """Each span with its original and origin (`spans_from_otlp` keeps the request's order)."""
    out: list[HeldSpan] = []
    converted = iter(spans)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            origin = Origin(
                resource_spans.resource,
                resource_spans.schema_url,
                scope_spans.scope,
                scope_spans.schema_url,
            )
            out.extend(HeldSpan(next(converted), proto, origin) for proto in scope_spans.spans)
    return out


def encode_response(rejected: int, message: str, *, as_json: bool) -> bytes:
    """An `ExportTraceServiceResponse`, with `partial_success` when spans were rejected."""
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if as_json:
        return json.dumps(json_format.MessageToDict(response)).encode()
    return response.SerializeToString()  # type: ignore[no-any-return]


def encode_status(code: int, message: str, *, as_json: bool) -> bytes:
    """A `google.rpc.Status` body, as OTLP/HTTP asks for on errors."""
    status = status_pb2.Status(code=code, message=message)
    if as_json:
        return json.dumps(json_format.MessageToDict(status)).encode()
    return status.SerializeToString()  # type: ignore[no-any-return]


def rejection_message(batch: Batch, max_span_bytes: int, max_spans_per_trace: int) -> str:
    """The partial-success message: how many spans were refused, and why."""
    by_reason: dict[str, int] = {}
    for reasons in batch.lost.values():
        for reason, n in reasons.items():
            by_reason[reason] = by_reason.get(reason, 0) + n
    texts = {
        "span_too_large": f"over {max_span_bytes} bytes",
        "trace_span_limit": f"past {max_spans_per_trace} spans in one trace",
    }
    parts = [f"{n} span(s) {texts.get(reason, reason)}" for reason, n in sorted(by_reason.items())]
    return "rejected: " + "; ".join(parts) + " (their traces are judged as damaged)"
