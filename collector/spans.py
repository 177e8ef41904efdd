"""The span model every reader produces and the evaluator consumes.

A `Span` is a plain, immutable record: ids as lowercase hex, times as integer nanoseconds
since the Unix epoch, attributes as a flat mapping of OTLP scalar or array values, and its
events by name (OTLP span events, Jaeger span logs), which first-token marks may name.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "AttrValue",
    "Span",
    "SpanEvent",
    "SpanKind",
    "first_events",
    "group_by_trace",
    "same_host",
    "seconds_value",
]

AttrValue = str | bool | int | float | Sequence[str | bool | int | float]


class SpanKind(enum.Enum):
    """OTLP span kinds, named as `budget.yaml` names them."""

    INTERNAL = "internal"
    SERVER = "server"
    CLIENT = "client"
    PRODUCER = "producer"
    CONSUMER = "consumer"

    # Members are singletons: identity hashing is correct and far cheaper than Enum's own,
    # which matters on the evaluator's hot path.
    __hash__ = object.__hash__

    @classmethod
    def from_otlp(cls, value: int) -> SpanKind:
        """Map OTLP's `SpanKind` number; UNSPECIFIED (0) reads as INTERNAL, as the spec says."""
        return _OTLP_KINDS.get(value, cls.INTERNAL)

    def to_otlp(self) -> int:
        return _KIND_TO_OTLP[self]


_OTLP_KINDS = {
    1: SpanKind.INTERNAL,
    2: SpanKind.SERVER,
    3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER,
    5: SpanKind.CONSUMER,
}
_KIND_TO_OTLP = {kind: number for number, kind in _OTLP_KINDS.items()}


class SpanEvent(NamedTuple):
    """A span event: its name and when it happened (ns since the Unix epoch).

    Event attributes are not kept: nothing judges by them, and instrumentations that
    emit an event per streamed chunk would make them the bulk of a span.
    """

    name: str
    time_ns: int


def first_events(events: Iterable[tuple[str, int]]) -> tuple[SpanEvent, ...]:
    """Each event name once, at its earliest time, ordered by time then name.

    What a span keeps of its events: an instrumentation may add one per streamed chunk
    (hundreds a span), and a first-token mark needs only the first of a name.
    """
    earliest: dict[str, int] = {}
    for name, time_ns in events:
        seen = earliest.get(name)
        if seen is None or time_ns < seen:
            earliest[name] = time_ns
    return tuple(
        sorted((SpanEvent(name, t) for name, t in earliest.items()), key=lambda e: (e[1], e[0]))
    )


@dataclass(frozen=True, slots=True)
class Span:
    """One finished span.

    `parent_span_id` is None for a span that declares no parent; a parent id that is not in
    the trace is kept as given (the evaluator treats such a span as parentless).
    `end_ns` is never before `start_ns`: readers clamp it. `events` holds each event name
    once, at its earliest time (`first_events`). `host` is the resource's `host.name`,
    else its `host.id`, else None (clock skew is judged per host: DESIGN §5 rule 3).
    `scope` is the name of the instrumentation scope that made it (OTLP's
    `InstrumentationScope`, Jaeger's `otel.scope.name` tag), which tells the library that
    traced it (`budget.recognize`); None when the source does not say.
    """

    trace_id: str
    span_id: str
    name: str
    start_ns: int
    end_ns: int
    parent_span_id: str | None = None
    kind: SpanKind = SpanKind.INTERNAL
    service: str = "unknown_service"
    attributes: Mapping[str, AttrValue] = field(default_factory=dict)
    error: bool = False
    events: tuple[SpanEvent, ...] = ()
    host: str | None = None
    scope: str | None = None


def group_by_trace(spans: Iterable[Span]) -> dict[str, list[Span]]:
    """Group spans by trace id, keeping first-seen order of traces and spans."""
    traces: dict[str, list[Span]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    return traces


def same_host(a_host: str | None, a_service: str, b_host: str | None, b_service: str) -> bool:
    """Whether two spans ran on one host, hence on one clock (DESIGN §5 rule 3): by their
    hosts, or by their service names where either has no host."""
    if a_host is None or b_host is None:
        return a_service == b_service
    return a_host == b_host


def seconds_value(value: AttrValue | None) -> float | None:
    """An attribute's value read as seconds (a first-token mark, a vLLM phase), or None:
    only a non-negative int or float (not a bool) whose nanoseconds a float can hold says
    anything; NaN, infinities and numbers too large for that are ignored, as absent."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if seconds >= 0 and math.isfinite(seconds * 1e9) else None
