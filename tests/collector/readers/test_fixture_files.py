"""Every real OTLP and Jaeger file in the shared fixtures, read and checked field by field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from spanbudget.collector.readers import parse_traces, read_traces
from spanbudget.collector.readers._otlp import request_from_json
from spanbudget.collector.spans import Span, SpanKind


def test_every_fixture_file_is_read(shared_fixtures: Path) -> None:
    files = sorted((shared_fixtures / "otlp").glob("*.json"))
    files += sorted((shared_fixtures / "jaeger").glob("*.json"))
    assert len(files) == 6
    for path in files:
        spans = read_traces(path)
        assert spans, path
        assert all(len(s.trace_id) == 32 and len(s.span_id) == 16 for s in spans), path


def test_otel_proto_example_uppercase_hex_is_lowercased(shared_fixtures: Path) -> None:
    (span,) = read_traces(shared_fixtures / "otlp" / "otel-proto_examples_trace.json")
    assert span == Span(
        trace_id="5b8efff798038103d269b633813fc60c",
        span_id="eee19b7ec3c1b174",
        parent_span_id="eee19b7ec3c1b173",
        name="I'm a server span",
        start_ns=1544712660000000000,
        end_ns=1544712661000000000,
        kind=SpanKind.SERVER,
        service="my.service",
        attributes={"my.span.attr": "some value"},
        error=False,
        scope="my.library",  # the instrumentation scope, which recognition reads
    )


def test_jaeger_integration_example_three_services_no_parents(shared_fixtures: Path) -> None:
    spans = read_traces(shared_fixtures / "otlp" / "jaeger_integration_example_trace.json")
    assert [(s.span_id[-1], s.name, s.service, s.kind) for s in spans] == [
        ("4", "example-operation-2", "example-service-2", SpanKind.INTERNAL),
        ("5", "example-operation-1", "example-service-3", SpanKind.INTERNAL),
        ("3", "example-operation-1", "example-service-1", SpanKind.INTERNAL),
        ("6", "example-operation-3", "example-service-1", SpanKind.SERVER),
        ("7", "example-operation-4", "example-service-1", SpanKind.CLIENT),
    ]
    for span in spans:
        assert span.trace_id == "00000000000000000000000000000011"
        assert span.span_id.startswith("000000000000000")
        assert span.parent_span_id is None
        assert (span.start_ns, span.end_ns) == (1485449191639875000, 1485449191639975000)
        assert span.attributes == {}  # the events are not attributes
        assert not span.error


def _telemetrygen_span() -> Span:
    return Span(
        trace_id="83a9efd15c1c98a977e0711cc93ee28b",
        span_id="e127af99e3b3e074",
        parent_span_id="909541b92cf05311",
        name="okey-dokey-0",
        start_ns=1706678909209712000,
        end_ns=1706678909209835000,
        kind=SpanKind.SERVER,
        service="telemetrygen",
        attributes={"net.peer.ip": "1.2.3.4", "peer.service": "telemetrygen-client"},
        error=False,
        scope="telemetrygen",  # in Jaeger's JSON, its otel.scope.name tag
    )


def test_telemetrygen_otlp_in_file(shared_fixtures: Path) -> None:
    spans = read_traces(shared_fixtures / "otlp" / "jaeger_otlp2jaeger-in_telemetrygen.json")
    assert spans == [_telemetrygen_span(), _telemetrygen_span()]


def test_jaeger_ui_out_file_equals_its_otlp_in_file(shared_fixtures: Path) -> None:
    """Jaeger's own /api/transform pair: OTLP in, UI JSON out. Both must read the same."""
    from_jaeger = read_traces(shared_fixtures / "jaeger" / "jaeger_ui_otlp2jaeger-out.json")
    from_otlp = read_traces(shared_fixtures / "otlp" / "jaeger_otlp2jaeger-in_telemetrygen.json")
    assert from_jaeger == from_otlp
    # the tags Jaeger derived from OTLP fields became fields again, not attributes
    assert "span.kind" not in from_jaeger[0].attributes
    assert "otel.scope.name" not in from_jaeger[0].attributes


def test_jaeger_api_v3_get_trace(shared_fixtures: Path) -> None:
    (span,) = read_traces(shared_fixtures / "jaeger" / "jaeger_apiv3_GetTrace.json")
    assert span == Span(
        trace_id="00000000000000000000000000000001",
        span_id="0000000000000002",
        name="foobar",
        start_ns=0,  # the snapshot carries no times: proto3 defaults
        end_ns=0,
        kind=SpanKind.SERVER,
        service="unknown_service",  # its resource is empty
        error=True,  # status.code 2
    )


def test_jaeger_uimodel_unwrapped_trace(shared_fixtures: Path) -> None:
    spans = read_traces(shared_fixtures / "jaeger" / "jaeger_uimodel_ui_01.json")
    # 64-bit Jaeger trace ids are padded to 128 bits, as Jaeger itself does for OTLP
    assert {s.trace_id for s in spans} == {"00000000000000000000000000000001"}
    assert [(s.span_id, s.name, s.service, s.parent_span_id) for s in spans] == [
        ("0000000000000002", "test-general-conversion", "service-x", None),
        ("0000000000000002", "some-operation", "service-x", None),
        ("0000000000000003", "some-operation", "service-y", "0000000000000002"),
        # CHILD_OF into another trace is skipped; the next CHILD_OF in this trace wins
        ("0000000000000004", "reference-test", "service-y", "0000000000000002"),
        ("0000000000000005", "preserveParentID-test", "service-y", "0000000000000004"),
    ]
    assert [s.end_ns - s.start_ns for s in spans] == [5000, 5000, 5000, 5000, 4000]
    assert all(s.start_ns == 1485467191639875000 for s in spans)
    assert all(s.kind is SpanKind.INTERNAL for s in spans)
    tagged = spans[1]
    assert tagged.error  # tag error=true
    assert tagged.attributes == {
        "peer.service": "service-y",
        "peer.ipv4": 23456,
        "temperature": 72.5,
        "javascript_limit": 9223372036854775222,  # int64 written as a JSON string
        "blob": "AAAwOQ==",  # binary stays as its base64 text
    }
    assert not any(s.error for s in spans if s is not tagged)
    assert spans[0].attributes == {}  # logs are not attributes


@pytest.mark.parametrize(
    "name",
    [
        "otel-proto_examples_trace.json",
        "jaeger_otlp2jaeger-in_telemetrygen.json",
        "jaeger_integration_example_trace.json",
    ],
)
def test_otlp_fixture_as_protobuf_reads_the_same(shared_fixtures: Path, name: str) -> None:
    path = shared_fixtures / "otlp" / name
    document = json.loads(path.read_bytes())
    request = request_from_json(document, name)
    assert isinstance(request, ExportTraceServiceRequest)
    from_proto = parse_traces(request.SerializeToString(), f"{name}.pb")
    assert from_proto == read_traces(path)
