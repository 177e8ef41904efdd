"""OTLP intake cost: protobuf decode alone vs decode + `spans_from_otlp`, 12-span traces.

Run: `.venv/bin/python bench/readers.py [--traces N] [--repeat R] [--quick]`; prints spans/s
side by side. `--quick` (CI) runs each row twice on 20 traces: it checks the bench runs.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_summary import record
from spanbudget.collector.readers import parse_traces, spans_from_otlp

SPANS_PER_TRACE = 12


def _attributes(i: int) -> list[KeyValue]:
    """Eight attributes like the reference path's: strings, ints, a float and a bool."""
    return [
        KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")),
        KeyValue(key="gen_ai.request.model", value=AnyValue(string_value="Qwen/Qwen3-0.6B")),
        KeyValue(key="gen_ai.request.stream", value=AnyValue(bool_value=True)),
        KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(int_value=812 + i)),
        KeyValue(key="gen_ai.response.time_to_first_chunk", value=AnyValue(double_value=0.1)),
        KeyValue(key="server.address", value=AnyValue(string_value="127.0.0.1")),
        KeyValue(key="server.port", value=AnyValue(int_value=8000)),
        KeyValue(key="loadtest.run_id", value=AnyValue(string_value="run-0001")),
    ]


def build_request(traces: int) -> ExportTraceServiceRequest:
    spans = []
    start = 1_764_670_000_000_000_000
    for t in range(traces):
        trace_id = os.urandom(16)
        ids = [os.urandom(8) for _ in range(SPANS_PER_TRACE)]
        for n in range(SPANS_PER_TRACE):
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=ids[n],
                    parent_span_id=ids[0] if n else b"",
                    name=f"stage-{n}",
                    kind=Span.SPAN_KIND_SERVER if n == 0 else Span.SPAN_KIND_INTERNAL,
                    start_time_unix_nano=start + t * 1000 + n,
                    end_time_unix_nano=start + t * 1000 + n + 5_000_000,
                    attributes=_attributes(n),
                    status=Status(code=Status.STATUS_CODE_OK),
                )
            )
    service = KeyValue(key="service.name", value=AnyValue(string_value="rag-gateway"))
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=[service]),
                scope_spans=[ScopeSpans(spans=spans)],
            )
        ]
    )


def otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON as exporters write it: proto-JSON with hex ids instead of base64."""
    document = json_format.MessageToDict(request)
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def _best_seconds(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - began)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=int, default=200, help="traces per request")
    parser.add_argument("--repeat", type=int, default=20, help="runs per row; best is kept")
    parser.add_argument("--quick", action="store_true", help="a short run (CI)")
    args = parser.parse_args()
    if args.quick:
        args.traces, args.repeat = 20, 2

    request = build_request(args.traces)
    payload = request.SerializeToString()
    n_spans = args.traces * SPANS_PER_TRACE
    assert len(spans_from_otlp(ExportTraceServiceRequest.FromString(payload))) == n_spans
    json_payload = otlp_json(request)
    assert parse_traces(json_payload, "bench") == parse_traces(payload, "bench")

    rows = [
        ("decode only (protobuf, upb)", lambda: ExportTraceServiceRequest.FromString(payload)),
        (
            "decode + spans_from_otlp",
            lambda: spans_from_otlp(ExportTraceServiceRequest.FromString(payload)),
        ),
        ("parse_traces(protobuf bytes)", lambda: parse_traces(payload, "bench")),
        ("parse_traces(OTLP/JSON bytes)", lambda: parse_traces(json_payload, "bench")),
    ]
    print(f"{n_spans} spans per request ({args.traces} traces x {SPANS_PER_TRACE} spans, ")
    print(f"8 attributes each), {len(payload)} bytes protobuf; best of {args.repeat} runs")
    print(f"{'path':<32} {'spans/s':>12} {'µs/span':>9} {'µs/trace':>9}")
    rates = []
    for label, run in rows:
        seconds = _best_seconds(run, args.repeat)
        rates.append(n_spans / seconds)
        per_span_us = seconds / n_spans * 1e6
        print(
            f"{label:<32} {n_spans / seconds:>12,.0f} {per_span_us:>9.2f} "
            f"{per_span_us * SPANS_PER_TRACE:>9.1f}"
        )

    record(
        "readers",
        "OTLP protobuf decode + spans_from_otlp",
        rates[1],
        "spans/s",
        aim="the collector's floor: no aim of its own",
        floor=rates[0],
        floor_name="protobuf decode alone",
    )


if __name__ == "__main__":
    main()
