"""Malformed input of every kind gives a TraceReadError naming the file and the problem."""

from __future__ import annotations

import contextlib
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from spanbudget.collector.readers import TraceReadError, parse_traces, read_traces

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


def _otlp(**span_fields: Any) -> bytes:
    span = {
        "traceId": TRACE,
        "spanId": SPAN,
        "name": "x",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
        **span_fields,
    }
    span = {key: value for key, value in span.items() if value is not None}
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def _jaeger(**span_fields: Any) -> bytes:
    span = {
        "traceID": TRACE,
        "spanID": SPAN,
        "operationName": "x",
        "startTime": 1,
        "duration": 1,
        "tags": [],
        "processID": "p1",
        **span_fields,
    }
    span = {key: value for key, value in span.items() if value is not None}
    return json.dumps({"data": [{"traceID": TRACE, "spans": [span], "processes": {}}]}).encode()


def _protobuf(trace_id: bytes = bytes(16), span_id: bytes = b"\x01" * 8) -> bytes:
    span = Span(trace_id=trace_id, span_id=span_id, name="x")
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
    )
    data: bytes = request.SerializeToString()
    return data


_GOOD_PROTO = _protobuf(trace_id=b"\x01" * 16)

CASES: list[tuple[str, bytes, str]] = [
    ("empty", b"", "empty"),
    ("whitespace", b" \n\t\n", "empty"),
    ("bad-json", b'{"resourceSpans": [', "invalid JSON at line 1"),
    ("bad-json-line-2", _otlp() + b"\n" + b'{"resourceSpans": [}\n', "line 2"),
    ("not-utf8", b'{"resourceSpans": "\xff"}', "not UTF-8"),
    ("unknown-object", b'{"traces": []}', "unrecognised JSON object (keys: traces)"),
    ("json-array-of-numbers", b"[1, 2]", "[0]: unrecognised JSON value"),
    ("json-string", b'"resourceSpans"', "not a recognised trace format"),
    ("text", b"hello, world\n", "not a recognised trace format"),
    ("yaml", b"resourceSpans:\n  - {}\n", "not a recognised trace format"),
    ("random-binary", bytes(range(7, 200)), "not a recognised trace format"),
    ("resource-spans-not-list", b'{"resourceSpans": "x"}', "resourceSpans"),
    ("name-not-string", _otlp(name=5), "name"),
    ("time-not-number", _otlp(startTimeUnixNano="soon"), "startTimeUnixNano"),
    ("time-negative", _otlp(endTimeUnixNano=-5), "endTimeUnixNano"),
    ("kind-wrong-type", _otlp(kind=[2]), "kind"),
    ("trace-id-short", _otlp(traceId="0af765"), "traceId has 6 hex digits, expected 32"),
    ("span-id-long", _otlp(spanId=SPAN + "00"), "spanId has 18 hex digits, expected 16"),
    ("parent-id-short", _otlp(parentSpanId="abcd"), "parentSpanId has 4 hex digits"),
    ("trace-id-not-hex", _otlp(traceId="z" * 32), "traceId is not hex"),
    ("trace-id-number", _otlp(traceId=12), "traceId must be a hex string"),
    ("trace-id-missing", _otlp(traceId=None), "traceId is missing"),
    ("span-id-missing", _otlp(spanId=None), "spanId is missing"),
    ("link-id-bad", _otlp(links=[{"traceId": "xyz", "spanId": SPAN}]), "links[0].traceId"),
    ("result-not-object", b'{"result": [1]}', '"result" must be an object'),
    ("v3-error", b'{"error": {"httpCode": 500, "message": "boom"}}', "Jaeger API error 500: boom"),
    ("proto-truncated", _GOOD_PROTO[:-5], "not a valid OTLP protobuf message"),
    ("proto-short-trace-id", _protobuf(trace_id=b"\x01" * 3), "traceId has 3 bytes, expected 16"),
    ("proto-no-trace-id", _protobuf(trace_id=b""), "spans[0]: traceId is missing"),
    (
        "length-prefixed-truncated",
        len(_GOOD_PROTO).to_bytes(4, "big") + _GOOD_PROTO + b"\x00\x00\x01\x00\x0a",
        "truncated",
    ),
    ("gzip-broken", gzip.compress(_otlp())[:-10], "gzip"),
    ("deeply-nested", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("jaeger-data-not-list", b'{"data": {"spans": []}}', '"data" must be a list'),
    ("jaeger-trace-not-object", b'{"data": [5]}', "data[0] must be a trace object"),
    ("jaeger-spans-not-list", b'{"traceID": "1", "spans": null}', "trace.spans must be a list"),
    ("jaeger-span-id-missing", _jaeger(spanID=None), "data[0].spans[0].spanID is missing"),
    ("jaeger-trace-id-long", _jaeger(traceID="1" * 33), "traceID has 33 hex digits, at most 32"),
    ("jaeger-span-id-not-hex", _jaeger(spanID="xyz"), "spanID is not hex"),
    ("jaeger-start-missing", _jaeger(startTime=None), "startTime is missing"),
    ("jaeger-start-text", _jaeger(startTime="noon"), "startTime must be an integer"),
    ("jaeger-duration-bool", _jaeger(duration=True), "duration must be an integer"),
    ("jaeger-name-number", _jaeger(operationName=3), "operationName must be a string"),
    ("jaeger-tags-not-list", _jaeger(tags={"a": 1}), "tags must be a list"),
    ("jaeger-tag-no-key", _jaeger(tags=[{"value": 1}]), "tags[0] must be an object"),
    ("jaeger-tag-object", _jaeger(tags=[{"key": "a", "value": {}}]), "must be a scalar"),
    (
        "jaeger-tag-float-text",
        _jaeger(tags=[{"key": "a", "type": "float64", "value": "fast"}]),
        "tags[0].value is not a number",
    ),
    (
        "jaeger-tag-int-float",
        _jaeger(tags=[{"key": "a", "type": "int64", "value": 1.5}]),
        "tags[0].value must be an integer",
    ),
    ("jaeger-refs-not-list", _jaeger(references={"refType": "CHILD_OF"}), "references must be"),
    ("jaeger-ref-no-span", _jaeger(references=[{"traceID": TRACE}]), "references[0].spanID"),
    ("jaeger-errors-only", b'{"data": null, "errors": [{"msg": "x"}]}', "Jaeger reported errors"),
]


@pytest.mark.parametrize(("name", "data", "expected"), CASES, ids=[case[0] for case in CASES])
def test_malformed_file_names_the_file_and_the_problem(
    tmp_path: Path, name: str, data: bytes, expected: str
) -> None:
    path = tmp_path / f"{name}.json"
    path.write_bytes(data)
    with pytest.raises(TraceReadError) as caught:
        read_traces(path)
    assert caught.value.source == str(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert expected in caught.value.message


def test_malformed_bytes_name_the_given_source() -> None:
    with pytest.raises(TraceReadError, match=r"^upload #3: invalid JSON"):
        parse_traces(b"{oops", "upload #3")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceReadError, match="cannot read the file: No such file"):
        read_traces(tmp_path / "absent.json")
    with pytest.raises(TraceReadError, match="cannot read the file"):
        read_traces(tmp_path)


def test_every_truncation_of_a_protobuf_is_spans_or_a_trace_read_error() -> None:
    """Cut anywhere: decoding may succeed on a field boundary, but never raises anything else."""
    for end in range(1, len(_GOOD_PROTO)):
        with contextlib.suppress(TraceReadError):
            parse_traces(_GOOD_PROTO[:end], "cut.pb")


def test_every_truncation_of_a_json_line_file_is_a_trace_read_error() -> None:
    first = _otlp()
    data = first + b"\n" + _jaeger() + b"\n"
    for end in range(1, len(data) - 1):
        if end in (len(first), len(first) + 1):
            continue  # the whole first line alone is a complete file
        with pytest.raises(TraceReadError):
            parse_traces(data[:end], "cut.jsonl")
