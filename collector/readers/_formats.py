"""Trace files of any supported format, recognised by their content, read into spans.

JSON: OTLP `ExportTraceServiceRequest` (one document, or one per line as the OTel Collector
file exporter writes them), Jaeger UI `{"data": [...]}` or a single UI trace object, Jaeger
API v3 `{"result": {...}}` (several concatenated when streamed). Binary: OTLP protobuf, or
the file exporter's `format: proto` (each message after a 4-byte big-endian length).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..spans import Span
from ._errors import TraceReadError
from ._jaeger_ui import spans_from_jaeger_trace, spans_from_jaeger_ui
from ._otlp import (
    request_from_json,
    request_from_protobuf,
    spans_from_otlp,
)

__all__ = ["parse_traces", "read_traces"]

_NOT_WHITESPACE = re.compile(rb"[^ \t\r\n]")
_UTF8_BOM = b"\xef\xbb\xbf"
_GZIP_MAGIC = b"\x1f\x8b"
# Field 1 (resource_spans), wire type 2: how every non-empty ExportTraceServiceRequest starts.
_OTLP_PROTO_START = 0x0A
_LENGTH_PREFIX_BYTES = 4
_FORMATS_HINT = (
    'expected OTLP JSON or protobuf, Jaeger UI JSON ({"data": [...]}) '
    'or a Jaeger API v3 response ({"result": {...}})'
)


def read_traces(path: Path) -> list[Span]:
    """Read every span in one trace file; the format is recognised from the content."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TraceReadError(source, f"cannot read the file: {exc.strerror or exc}") from None
    return parse_traces(data, source)


def parse_traces(data: bytes, source: str) -> list[Span]:
    """Read every span in `data`, whose format is recognised from its content.

    `source` names the data in error messages. Anything that is not a supported format, or
    is malformed, raises `TraceReadError`.
    """
    try:
        if data.startswith(_GZIP_MAGIC):
            data = _gunzip(data, source)
        data = data.removeprefix(_UTF8_BOM)
        first = _NOT_WHITESPACE.search(data)
        if first is None:
            raise TraceReadError(source, "no trace data: the input is empty")
        if first.group() in (b"{", b"["):
            if data[0] == _OTLP_PROTO_START:
                # b"\n{" may also start a protobuf message whose first field is 123 bytes long.
                try:
                    request = request_from_protobuf(data, source)
                except TraceReadError:
                    return _spans_from_json(data, source)
                return spans_from_otlp(request, source=source)
            return _spans_from_json(data, source)
        return _spans_from_protobuf(data, source)
    except RecursionError:
        raise TraceReadError(source, "the input is nested too deeply to be trace data") from None


def _gunzip(data: bytes, source: str) -> bytes:
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceReadError(source, f"broken gzip data: {exc}") from None


def _spans_from_json(body: bytes, source: str) -> list[Span]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceReadError(source, f"JSON that is not UTF-8 (byte {exc.start})") from None
    spans: list[Span] = []
    for line, document in _json_documents(text, source):
        try:
            spans.extend(_spans_from_document(document, source))
        except TraceReadError as exc:
            if line == 1:
                raise
            raise TraceReadError(source, f"document at line {line}: {exc.message}") from None
    return spans


def _json_documents(text: str, source: str) -> Iterator[tuple[int, Any]]:
    """(line, value) of each JSON value, back to back or one per line (JSON lines)."""
    decoder = json.JSONDecoder()
    position = 0
    line = 1
    end = len(text)
    while True:
        while position < end and text[position] in " \t\r\n":
            line += text[position] == "\n"
            position += 1
        if position == end:
            return
        try:
            document, next_position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise TraceReadError(
                source, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
        yield line, document
        line += text.count("\n", position, next_position)
        position = next_position


def _spans_from_document(document: Any, source: str) -> list[Span]:
    if isinstance(document, list):
        # A JSON array of documents, as people save several API responses in one file.
        spans: list[Span] = []
        for n, item in enumerate(document):
            try:
                spans.extend(_spans_from_document(item, source))
            except TraceReadError as exc:
                raise TraceReadError(source, f"[{n}]: {exc.message}") from None
        return spans
    if not isinstance(document, dict):
        raise TraceReadError(source, f"unrecognised JSON value: {_FORMATS_HINT}")
    if "resourceSpans" in document or not document:
        return spans_from_otlp(request_from_json(document, source), source=source)
    if "result" in document:
        result = document["result"]
        if not isinstance(result, dict):
            raise TraceReadError(source, '"result" must be an object holding resourceSpans')
        return spans_from_otlp(request_from_json(result, source), source=source)
    if isinstance(document.get("error"), dict):
        error = document["error"]
        code = error.get("httpCode", "")
        raise TraceReadError(source, f"Jaeger API error {code}: {error.get('message', error)}")
    if "data" in document:
        return spans_from_jaeger_ui(document, source)
    if "spans" in document and "traceID" in document:
        return spans_from_jaeger_trace(document, source)
    keys = ", ".join(sorted(document)[:5])
    raise TraceReadError(source, f"unrecognised JSON object (keys: {keys}): {_FORMATS_HINT}")


def _spans_from_protobuf(data: bytes, source: str) -> list[Span]:
    if data[0] == _OTLP_PROTO_START:
        return spans_from_otlp(request_from_protobuf(data, source), source=source)
    spans: list[Span] = []
    for number, frame in enumerate(_length_prefixed_frames(data, source), start=1):
        try:
            spans.extend(spans_from_otlp(request_from_protobuf(frame, source), source=source))
        except TraceReadError as exc:
            raise TraceReadError(source, f"message {number}: {exc.message}") from None
    return spans


def _length_prefixed_frames(data: bytes, source: str) -> Iterator[bytes]:
    """Messages of the file exporter's proto format; anything else is not a trace format."""
    position = 0
    end = len(data)
    while position < end:
        size = int.from_bytes(data[position : position + _LENGTH_PREFIX_BYTES], "big")
        start = position + _LENGTH_PREFIX_BYTES
        frame = data[start : start + size]
        if start > end or len(frame) != size or (size and frame[0] != _OTLP_PROTO_START):
            if position == 0:
                raise TraceReadError(source, f"not a recognised trace format: {_FORMATS_HINT}")
            raise TraceReadError(
                source, f"length-prefixed OTLP protobuf is truncated at byte {position}"
            )
        yield frame
        position = start + size
