"""OTLP JSON, JSON lines and protobuf inputs built here: the cases the real files lack."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Status
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.sdk.resources import Resource as SdkResource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind as SdkSpanKind
from opentelemetry.trace import StatusCode
from spanbudget.collector.readers import parse_traces, read_traces, spans_from_otlp
from spanbudget.collector.spans import SpanKind

TRACE = "0af7651916cd43dd8448eb211c80319c"
ROOT = "b7ad6b7169203331"
CHILD = "00f067aa0ba902b7"


def _span(span_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "traceId": TRACE,
        "spanId": span_id,
        "name": f"span {span_id}",
        "startTimeUnixNano": "1760000000000000000",
        "endTimeUnixNano": "1760000000250000000",
        **fields,
    }


def _request(*spans: dict[str, Any], service: str = "rag-gateway") -> dict[str, Any]:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": list(spans)}]}]}


def _json(document: Any) -> bytes:
    return json.dumps(document).encode()


def test_json_lines_as_the_file_exporter_writes_them(tmp_path: Path) -> None:
    lines = [
        _request(_span(ROOT, kind=2)),
        _request(_span(CHILD, parentSpanId=ROOT, kind=3), service="vllm"),
    ]
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    root, child = read_traces(path)
    assert (root.span_id, root.parent_span_id, root.kind, root.service) == (
        ROOT,
        None,
        SpanKind.SERVER,
        "rag-gateway",
    )
    assert (child.span_id, child.parent_span_id, child.kind, child.service) == (
        CHILD,
        ROOT,
        SpanKind.CLIENT,
        "vllm",
    )


def test_content_not_extension_decides_the_format(tmp_path: Path) -> None:
    path = tmp_path / "traces.pb"  # says protobuf, holds JSON
    path.write_bytes(_json(_request(_span(ROOT))))
    assert [s.span_id for s in read_traces(path)] == [ROOT]


def test_int64_as_strings_or_numbers_and_kind_as_names_or_numbers() -> None:
    as_strings = _request(
        _span(ROOT, kind="SPAN_KIND_CLIENT", status={"code": "STATUS_CODE_ERROR"})
    )
    as_numbers = _request(
        _span(
            ROOT,
            startTimeUnixNano=1760000000000000000,
            endTimeUnixNano=1760000000250000000,
            kind=3,
            status={"code": 2},
        )
    )
    a = parse_traces(_json(as_strings), "strings.json")
    b = parse_traces(_json(as_numbers), "numbers.json")
    assert a == b
    assert a[0].start_ns == 1_760_000_000_000_000_000
    assert a[0].end_ns - a[0].start_ns == 250_000_000
    assert a[0].kind is SpanKind.CLIENT
    assert a[0].error


def test_unknown_fields_are_ignored() -> None:
    document = _request(_span(ROOT, droppedEventsCount=3, futureField={"x": [1, 2]}, flags=257))
    document["resourceSpans"][0]["somethingNew"] = True
    document["topLevelExtra"] = "ignored"
    (span,) = parse_traces(_json(document), "extra.json")
    assert span.span_id == ROOT


def test_uppercase_hex_ids_are_lowercased() -> None:
    document = _request(_span(ROOT.upper(), traceId=TRACE.upper(), parentSpanId=CHILD.upper()))
    (span,) = parse_traces(_json(document), "upper.json")
    assert (span.trace_id, span.span_id, span.parent_span_id) == (TRACE, ROOT, CHILD)


@pytest.mark.parametrize("parent", [None, "", "0000000000000000"])
def test_parentless_spans(parent: str | None) -> None:
    fields = {} if parent is None else {"parentSpanId": parent}
    (span,) = parse_traces(_json(_request(_span(ROOT, **fields))), "root.json")
    assert span.parent_span_id is None


def test_events_and_links_are_ignored() -> None:
    events = [{"timeUnixNano": "1760000000100000000", "name": "first token", "attributes": []}]
    links = [{"traceId": "ff" * 16, "spanId": "ee" * 8}]
    (span,) = parse_traces(_json(_request(_span(ROOT, events=events, links=links))), "e.json")
    assert span.attributes == {}
    assert (span.start_ns, span.end_ns) == (1760000000000000000, 1760000000250000000)


def test_end_before_start_is_clamped() -> None:
    document = _request(_span(ROOT, endTimeUnixNano="1759999999000000000"))
    (span,) = parse_traces(_json(document), "clamp.json")
    assert span.end_ns == span.start_ns == 1760000000000000000


def test_missing_service_name_reads_as_unknown_service() -> None:
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [_span(ROOT)]}]}]}
    (span,) = parse_traces(_json(document), "noservice.json")
    assert span.service == "unknown_service"


def test_attribute_values_of_every_anyvalue_type() -> None:
    attributes = [
        {"key": "s", "value": {"stringValue": "chat"}},
        {"key": "empty", "value": {"stringValue": ""}},
        {"key": "b", "value": {"boolValue": True}},
        {"key": "i_str", "value": {"intValue": "9007199254740993"}},
        {"key": "i_num", "value": {"intValue": 42}},
        {"key": "d", "value": {"doubleValue": 0.125}},
        {
            "key": "arr",
            "value": {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "2"}]}},
        },
        {
            "key": "kv",
            "value": {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": False}}]}},
        },
        {"key": "raw", "value": {"bytesValue": "AAAwOQ=="}},
        {"key": "nothing", "value": {}},
    ]
    (span,) = parse_traces(_json(_request(_span(ROOT, attributes=attributes))), "attrs.json")
    assert span.attributes == {
        "s": "chat",
        "empty": "",
        "b": True,
        "i_str": 9007199254740993,
        "i_num": 42,
        "d": 0.125,
        "arr": ["a", 2],
        "kv": '{"k":false}',
        "raw": "AAAwOQ==",
        "nothing": "",
    }


def test_api_v3_chunks_concatenated_and_one_per_line() -> None:
    first = {"result": _request(_span(ROOT))}
    second = {"result": _request(_span(CHILD, parentSpanId=ROOT))}
    for body in (_json(first) + _json(second), _json(first) + b"\n" + _json(second) + b"\n"):
        assert [s.span_id for s in parse_traces(body, "stream")] == [ROOT, CHILD]


def test_empty_requests_read_as_no_spans() -> None:
    assert parse_traces(b"{}", "empty-request.json") == []
    assert parse_traces(b'{"resourceSpans": []}', "empty.json") == []
    assert parse_traces(b'{"result": {}}', "empty-v3.json") == []


def _proto_request() -> ExportTraceServiceRequest:
    span = ProtoSpan(
        trace_id=bytes.fromhex(TRACE),
        span_id=bytes.fromhex(CHILD),
        parent_span_id=bytes.fromhex(ROOT),
        name="chat Qwen/Qwen3-0.6B",
        kind=ProtoSpan.SPAN_KIND_CLIENT,
        start_time_unix_nano=1_760_000_000_000_000_000,
        end_time_unix_nano=1_760_000_000_120_000_000,
        attributes=[
            KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")),
            KeyValue(key="gen_ai.response.time_to_first_chunk", value=AnyValue(double_value=0.1)),
            KeyValue(
                key="tags",
                value=AnyValue(
                    array_value=ArrayValue(
                        values=[
                            AnyValue(bool_value=True),
                            AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="a")])),
                        ]
                    )
                ),
            ),
        ],
        events=[ProtoSpan.Event(time_unix_nano=1_760_000_000_100_000_000, name="token")],
        status=Status(code=Status.STATUS_CODE_ERROR, message="stream broke"),
    )
    service = KeyValue(key="service.name", value=AnyValue(string_value="rag-gateway"))
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=[service]), scope_spans=[ScopeSpans(spans=[span])]
            )
        ]
    )


def test_protobuf_round_trip() -> None:
    (span,) = parse_traces(_proto_request().SerializeToString(), "request.pb")
    assert (span.trace_id, span.span_id, span.parent_span_id) == (TRACE, CHILD, ROOT)
    assert span.name == "chat Qwen/Qwen3-0.6B"
    assert span.kind is SpanKind.CLIENT
    assert span.service == "rag-gateway"
    assert span.end_ns - span.start_ns == 120_000_000
    assert span.error
    assert span.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.response.time_to_first_chunk": 0.1,
        "tags": [True, '{"a":null}'],
    }
    assert spans_from_otlp(_proto_request()) == [span]


def test_file_exporter_length_prefixed_protobuf(tmp_path: Path) -> None:
    message = _proto_request().SerializeToString()
    framed = b"".join(len(message).to_bytes(4, "big") + message for _ in range(3))
    path = tmp_path / "traces.binpb"
    path.write_bytes(framed)
    spans = read_traces(path)
    assert len(spans) == 3
    assert spans[0] == spans[2] == parse_traces(message, "one")[0]


def test_gzip_compressed_input() -> None:
    body = gzip.compress(_json(_request(_span(ROOT))))
    assert [s.span_id for s in parse_traces(body, "traces.json.gz")] == [ROOT]


def test_protobuf_whose_first_length_byte_looks_like_json() -> None:
    """b"\\n{" starts both a 123-byte protobuf field and (after a newline) a JSON object."""
    span = ProtoSpan(trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex(ROOT), name="")
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
    )
    name = "x" * (ord("{") - request.resource_spans[0].ByteSize() - 2)  # + tag, length
    request.resource_spans[0].scope_spans[0].spans[0].name = name
    data = request.SerializeToString()
    assert data[:2] == b"\n{"
    assert parse_traces(data, "ambiguous.pb")[0].name == name


def test_spans_from_the_real_sdk_exporter_encoding() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=SdkResource.create({"service.name": "rag-gateway"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("POST /v1/chat/completions", kind=SdkSpanKind.SERVER) as root,
        tracer.start_as_current_span("retrieval rag-docs") as child,
    ):
        child.set_attribute("gen_ai.operation.name", "retrieval")
        child.set_attribute("top_k", 5)
        child.set_status(StatusCode.ERROR)
    provider.shutdown()
    finished = exporter.get_finished_spans()
    spans = spans_from_otlp(encode_spans(finished))
    by_name = {s.name: s for s in spans}
    server = by_name["POST /v1/chat/completions"]
    retrieval = by_name["retrieval rag-docs"]
    assert server.trace_id == f"{root.get_span_context().trace_id:032x}"
    assert server.span_id == f"{root.get_span_context().span_id:016x}"
    assert server.parent_span_id is None
    assert server.kind is SpanKind.SERVER
    assert retrieval.parent_span_id == server.span_id
    assert retrieval.span_id == f"{child.get_span_context().span_id:016x}"
    assert retrieval.attributes == {"gen_ai.operation.name": "retrieval", "top_k": 5}
    assert retrieval.error
    assert not server.error
    assert {s.service for s in spans} == {"rag-gateway"}
    sdk_child = next(s for s in finished if s.name == "retrieval rag-docs")
    assert (retrieval.start_ns, retrieval.end_ns) == (sdk_child.start_time, sdk_child.end_time)
