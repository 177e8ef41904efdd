"""Property: whatever the bytes, a reader returns spans or raises TraceReadError, nothing else."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spanbudget.collector.readers import TraceReadError, parse_traces
from spanbudget.collector.spans import Span

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
_json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
_hexish = st.text(alphabet="0123456789abcdefABCDEFxyz ", max_size=34)

_OTLP_SPAN_KEYS = [
    "traceId", "spanId", "parentSpanId", "name", "kind", "startTimeUnixNano",
    "endTimeUnixNano", "attributes", "status", "events", "links",
]  # fmt: skip
_JAEGER_SPAN_KEYS = [
    "traceID", "spanID", "operationName", "references", "startTime", "duration", "tags",
    "processID", "process", "logs",
]  # fmt: skip


def _span(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys), _json_values | _hexish, max_size=len(keys))


_otlp_documents = st.builds(
    lambda spans, resource: {
        "resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]
    },
    st.lists(_span(_OTLP_SPAN_KEYS), max_size=3),
    _json_values,
)
_jaeger_documents = st.builds(
    lambda spans, processes: {"data": [{"traceID": "1", "spans": spans, "processes": processes}]},
    st.lists(_span(_JAEGER_SPAN_KEYS), max_size=3),
    _json_values,
)
_documents = (
    _otlp_documents | _jaeger_documents | st.builds(lambda d: {"result": d}, _otlp_documents)
)


def _read(data: bytes) -> None:
    spans: list[Span] = []
    message = "fuzz: "
    try:
        spans = parse_traces(data, "fuzz")
    except TraceReadError as exc:  # the one exception type allowed
        message = str(exc)
    assert message.startswith("fuzz: ")
    for span in spans:
        assert len(span.trace_id) == 32
        assert len(span.span_id) == 16
        assert span.end_ns >= span.start_ns


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents)
def test_structured_json_of_any_shape(document: dict[str, Any]) -> None:
    _read(json.dumps(document).encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    _read(data)


@settings(max_examples=200, deadline=None)
@given(_json_values)
def test_arbitrary_json(value: Any) -> None:
    _read(json.dumps(value).encode())
