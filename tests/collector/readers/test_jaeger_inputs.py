"""Jaeger UI JSON cases the real files lack: status tags, kinds, references, process forms."""

from __future__ import annotations

import json
from typing import Any

import pytest
from spanbudget.collector.readers import parse_traces
from spanbudget.collector.spans import SpanKind

TRACE = "83a9efd15c1c98a977e0711cc93ee28b"


def _span(span_id: str, *tags: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "traceID": TRACE,
        "spanID": span_id,
        "operationName": f"op {span_id}",
        "references": [],
        "startTime": 1706678909209712,
        "duration": 1500,
        "tags": list(tags),
        "logs": [{"timestamp": 1706678909209800, "fields": [{"key": "event", "value": "x"}]}],
        "processID": "p1",
        **fields,
    }


def _read(*spans: dict[str, Any], wrapped: bool = True) -> list[Any]:
    trace = {
        "traceID": TRACE,
        "spans": list(spans),
        "processes": {"p1": {"serviceName": "rag-gateway", "tags": []}},
    }
    document = {"data": [trace], "total": 0, "errors": None} if wrapped else trace
    return parse_traces(json.dumps(document).encode(), "jaeger.json")


def _tag(key: str, value: Any, kind: str = "string") -> dict[str, Any]:
    return {"key": key, "type": kind, "value": value}


@pytest.mark.parametrize(
    ("tags", "error"),
    [
        ([_tag("otel.status_code", "ERROR")], True),
        ([_tag("otel.status_code", "OK")], False),
        ([_tag("error", True, "bool")], True),
        ([_tag("error", "true", "bool")], True),
        ([_tag("error", False, "bool")], False),
        ([], False),
    ],
)
def test_error_status_from_tags(tags: list[dict[str, Any]], error: bool) -> None:
    (span,) = _read(_span("00000000000000aa", *tags))
    assert span.error is error
    assert span.attributes == {}  # status tags are the status, not attributes


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("server", SpanKind.SERVER),
        ("client", SpanKind.CLIENT),
        ("producer", SpanKind.PRODUCER),
        ("consumer", SpanKind.CONSUMER),
        ("internal", SpanKind.INTERNAL),
        ("CLIENT", SpanKind.CLIENT),
        ("unheard-of", SpanKind.INTERNAL),
    ],
)
def test_span_kind_from_tag(value: str, kind: SpanKind) -> None:
    (span,) = _read(_span("00000000000000aa", _tag("span.kind", value)))
    assert span.kind is kind


def test_times_in_microseconds_become_nanoseconds() -> None:
    (span,) = _read(_span("00000000000000aa", startTime=1706678909209712, duration=1500))
    assert (span.start_ns, span.end_ns) == (1706678909209712000, 1706678909211212000)


def test_follows_from_is_the_parent_when_there_is_no_child_of() -> None:
    refs = [{"refType": "FOLLOWS_FROM", "traceID": TRACE, "spanID": "00000000000000bb"}]
    (span,) = _read(_span("00000000000000aa", references=refs))
    assert span.parent_span_id == "00000000000000bb"


def test_short_and_uppercase_ids_are_padded_and_lowercased() -> None:
    (span,) = _read(_span("ABC", traceID="00F1"), wrapped=False)
    assert (span.trace_id, span.span_id) == ("0" * 28 + "00f1", "0000000000000abc")


def test_embedded_process_and_missing_process() -> None:
    embedded = _span("00000000000000aa", process={"serviceName": "vllm"})
    del embedded["processID"]
    orphan = _span("00000000000000bb", processID="p9")
    first, second = _read(embedded, orphan)
    assert first.service == "vllm"
    assert second.service == "unknown_service"


def test_tag_types_and_derived_tags() -> None:
    tags = [
        _tag("gen_ai.response.time_to_first_chunk", "0.125", "float64"),
        _tag("gen_ai.usage.input_tokens", 812, "int64"),
        _tag("gen_ai.request.stream", True, "bool"),
        _tag("otel.scope.name", "fastapi"),
        _tag("w3c.tracestate", "x=1"),
    ]
    (span,) = _read(_span("00000000000000aa", *tags))
    assert span.attributes == {
        "gen_ai.response.time_to_first_chunk": 0.125,
        "gen_ai.usage.input_tokens": 812,
        "gen_ai.request.stream": True,
    }


def test_empty_data_reads_as_no_spans() -> None:
    assert parse_traces(b'{"data": [], "total": 0}', "none.json") == []
    assert parse_traces(b'{"data": null, "errors": null}', "none.json") == []
