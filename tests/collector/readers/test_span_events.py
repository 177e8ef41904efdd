"""Span events: OTLP span events and Jaeger span logs read the same, each name once at its
earliest time; the recorded Jaeger fixture's logs come through by their `event` field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from spanbudget.collector.readers import TraceReadError, parse_traces, read_traces
from spanbudget.collector.spans import SpanEvent, first_events

TRACE = "5b8aa5a2d2c872e8321cf37308d69df2"
SPAN = "0000000000000001"
T0 = 1_760_000_000_000_000_000
US = 1000


def otlp(events: list[dict[str, object]]) -> bytes:
    span = {
        "traceId": TRACE,
        "spanId": SPAN,
        "name": "ChatCompletion",
        "kind": 1,
        "startTimeUnixNano": str(T0),
        "endTimeUnixNano": str(T0 + 90_000 * US),
        "events": events,
    }
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(document).encode()


def jaeger(logs: object) -> bytes:
    span = {
        "traceID": TRACE,
        "spanID": SPAN,
        "operationName": "ChatCompletion",
        "startTime": T0 // US,
        "duration": 90_000,
        "logs": logs,
        "processID": "p1",
    }
    trace = {"traceID": TRACE, "spans": [span], "processes": {"p1": {"serviceName": "app"}}}
    return json.dumps({"data": [trace]}).encode()


EXPECTED = (
    SpanEvent("First Token Stream Event", T0 + 14_000 * US),
    SpanEvent("chunk", T0 + 15_000 * US),
)


def test_otlp_events_keep_each_name_once_at_its_earliest() -> None:
    events = [
        {"timeUnixNano": str(T0 + 16_000 * US), "name": "chunk"},
        {"timeUnixNano": str(T0 + 14_000 * US), "name": "First Token Stream Event"},
        {"timeUnixNano": str(T0 + 15_000 * US), "name": "chunk", "attributes": []},
    ]
    (span,) = parse_traces(otlp(events), "t.json")
    assert span.events == EXPECTED


def test_jaeger_logs_are_events_named_by_their_event_field() -> None:
    logs = [
        {"timestamp": (T0 + 16_000 * US) // US, "fields": [{"key": "event", "value": "chunk"}]},
        {
            "timestamp": (T0 + 14_000 * US) // US,
            "fields": [
                {"key": "level", "type": "string", "value": "info"},
                {"key": "event", "type": "string", "value": "First Token Stream Event"},
            ],
        },
        {"timestamp": (T0 + 15_000 * US) // US, "fields": [{"key": "event", "value": "chunk"}]},
        {"timestamp": (T0 + 1_000 * US) // US, "fields": [{"key": "message", "value": "no name"}]},
    ]
    (span,) = parse_traces(jaeger(logs), "t.json")
    assert span.events == EXPECTED


def test_a_span_without_events_has_none() -> None:
    assert parse_traces(otlp([]), "t.json")[0].events == ()
    assert parse_traces(jaeger([]), "t.json")[0].events == ()
    assert parse_traces(jaeger(None), "t.json")[0].events == ()


@pytest.mark.parametrize(
    ("logs", "problem"),
    [
        ({"timestamp": 1}, "logs must be a list"),
        (["x"], "logs[0] must be an object"),
        ([{"fields": []}], "logs[0].timestamp is missing"),
        ([{"timestamp": 1, "fields": {}}], "logs[0].fields must be a list"),
        ([{"timestamp": 1, "fields": [{"value": "x"}]}], "logs[0].fields[0] must be an object"),
    ],
)
def test_malformed_jaeger_logs_are_read_errors(logs: object, problem: str) -> None:
    with pytest.raises(TraceReadError, match=re.escape(problem)):
        parse_traces(jaeger(logs), "t.json")


def test_the_recorded_jaeger_trace_keeps_its_logs(shared_fixtures: Path) -> None:
    spans = read_traces(shared_fixtures / "jaeger" / "jaeger_uimodel_ui_01.json")
    with_events = [s for s in spans if s.events]
    assert with_events
    assert {e.name for s in with_events for e in s.events} >= {"some-event"}


def test_first_events_orders_by_time_then_name() -> None:
    assert first_events([("b", 5), ("a", 5), ("c", 1), ("b", 9)]) == (
        SpanEvent("c", 1),
        SpanEvent("a", 5),
        SpanEvent("b", 5),
    )
