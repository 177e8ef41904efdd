"""Malformed and mutated OTLP bodies built from reference-path traces, for the alert fuzz.

Deterministic for a seed. About nine in ten bodies are broken (flipped or cut protobuf,
garbage, JSON with wrong types or bad ids, corrupt gzip, a wrong content type) and must
be answered 4xx; the rest decode: whole traces sent again (duplicates, late spans),
fragments, traces with one span moved in time, and new traces built from the 40 with a
stage slowed down, which is what moves the burn rates.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from spanbudget.collector.spans import Span

from tests.support.otlp import request_to_json, to_request
from tests.support.traces import rag_trace

__all__ = ["Body", "fuzz_bodies", "protobuf", "reference_traces"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_MS = 1_000_000
# Extra milliseconds per stage: within budget, and each stage over its limit in turn.
_SHAPES: tuple[dict[str, float], ...] = (
    {},
    {},
    {},
    {"retrieval": 30},
    {"prefill": 60},
    {"gateway": 12},
    {"network": 40},
    {"queue": 45},
)


@dataclass(frozen=True)
class Body:
    kind: str
    content: bytes
    content_type: str
    headers: dict[str, str]


def reference_traces(rng: random.Random, count: int = 40) -> list[list[Span]]:
    return [
        rag_trace(trace_id=rng.randbytes(16).hex(), **_SHAPES[i % len(_SHAPES)]).spans
        for i in range(count)
    ]


def protobuf(spans: list[Span]) -> bytes:
    return bytes(to_request(spans).SerializeToString())


def _json(spans: list[Span]) -> bytes:
    return request_to_json(to_request(spans)).encode()


def _flip(data: bytes, rng: random.Random, flips: int) -> bytes:
    out = bytearray(data)
    for _ in range(flips):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def _json_edit(spans: list[Span], rng: random.Random) -> bytes:
    document: dict[str, Any] = json.loads(_json(spans))
    scope = rng.choice(document["resourceSpans"])["scopeSpans"][0]
    span = rng.choice(scope["spans"])
    key = rng.choice(["traceId", "spanId", "parentSpanId", "startTimeUnixNano", "name", "kind"])
    edit = rng.randrange(4)
    if edit == 0:
        span.pop(key, None)
    elif edit == 1:
        span[key] = rng.choice([42, [1], {"a": 1}, None, True])
    elif edit == 2:
        span[key] = "zz" * rng.choice([8, 15, 16])
    else:
        scope["spans"] = rng.choice(["spans", 7, [1, 2]])
    return json.dumps(document).encode()


def _moved(spans: list[Span], rng: random.Random) -> list[Span]:
    """One span shifted by up to 80 ms either way, or stretched."""
    i = rng.randrange(len(spans))
    shift = rng.randint(-80, 80) * _MS
    moved = list(spans)
    span = spans[i]
    if rng.random() < 0.5:
        moved[i] = replace(span, start_ns=span.start_ns + shift, end_ns=span.end_ns + shift)
    else:
        moved[i] = replace(span, end_ns=max(span.start_ns, span.end_ns + shift))
    return moved


def fuzz_bodies(seed: int, count: int) -> Iterator[Body]:
    """`count` bodies, as a client gone wrong would send them over a few seconds."""
    rng = random.Random(seed)
    traces = reference_traces(rng)
    for _ in range(count):
        spans = rng.choice(traces)
        roll = rng.random()
        if roll < 0.04:  # a new trace in one of the reference shapes, maybe retimed
            trace_id = rng.randbytes(16).hex()
            fresh = [replace(s, trace_id=trace_id) for s in spans]
            if rng.random() < 0.5:
                fresh = _moved(fresh, rng)
            yield Body("new trace", protobuf(fresh), PROTOBUF, {})
        elif roll < 0.06:
            yield Body("duplicate", protobuf(spans), PROTOBUF, {})
        elif roll < 0.08:
            part = rng.sample(spans, rng.randint(1, len(spans)))
            yield Body("fragment", _json(part), JSON, {})
        elif roll < 0.10:
            yield Body("retimed", _json(_moved(spans, rng)), JSON, {})
        elif roll < 0.30:
            yield Body(
                "flipped protobuf", _flip(protobuf(spans), rng, rng.randint(1, 8)), PROTOBUF, {}
            )
        elif roll < 0.45:
            data = protobuf(spans)
            yield Body("truncated protobuf", data[: rng.randrange(1, len(data))], PROTOBUF, {})
        elif roll < 0.55:
            yield Body("garbage", rng.randbytes(rng.randint(1, 4096)), PROTOBUF, {})
        elif roll < 0.75:
            yield Body("edited json", _json_edit(spans, rng), JSON, {})
        elif roll < 0.85:
            data = _json(spans)
            yield Body("flipped json", _flip(data, rng, rng.randint(1, 4)), JSON, {})
        elif roll < 0.95:
            data = gzip.compress(protobuf(spans))
            yield Body(
                "corrupt gzip",
                _flip(data, rng, rng.randint(1, 4)),
                PROTOBUF,
                {"Content-Encoding": "gzip"},
            )
        else:
            yield Body("wrong type", protobuf(spans), rng.choice(["text/plain", "image/png"]), {})
