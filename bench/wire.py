"""OTLP intake without a Python object per span (issue 46): the compiled wire reader
against the protobuf package, spans/s on one core, and memory per span held.

Run: .venv/bin/python bench/wire.py [--traces 20000] [--per-request 40] [--quick]

The 12-span reference traces of bench/pipeline.py, as OTLP protobuf requests, read side by
side in one run (each row the best of several passes over every request):

- protobuf decode alone (upb): the floor of anything that lets protobuf parse;
- decode + `spans_from_otlp`: the intake before the wire reader, a `Span` per span;
- decode + upb read in place: the fields the evaluator needs read off the decoded message
  and dropped (no records, no `Span`): the most that reading upb's message in place buys;
- pure-Python records: decode + `span_records.records_from_protobuf` (the fallback);
- compiled wire reader → `SpanRecords`, the evaluator's attributes only, then every one.

Then memory per span held, by tracemalloc, over `--memory-spans` spans: as `Span` objects
made by `spans_from_otlp` and made from the records (what the intake holds now: one string
object for each distinct string of a request), as records (evaluator's keys, every key),
and as records with the request bytes they point into (what a span store, the journal or
forwarding would keep anyway).
`--quick` (CI) reads a few hundred traces: it checks the bench runs, not its numbers.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_summary import record
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from pipeline import make_payloads
from rich.console import Console
from rich.table import Table
from spanbudget.collector.annotations import LOADTEST_PREFIX
from spanbudget.collector.budget import recognize
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget, Selector
from spanbudget.collector.judging import llm_calls
from spanbudget.collector.readers import spans_from_otlp
from spanbudget.collector.readers.span_records import (
    COMPILED,
    AttributeKeys,
    SpanReader,
    records_from_protobuf,
)
from spanbudget.common.semconv import (
    GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
    GEN_AI_LATENCY_TIME_IN_QUEUE,
    GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN,
    GEN_AI_OPERATION_NAME,
    HOST_ID,
    HOST_NAME,
    SERVICE_NAME,
)

SPANS_PER_TRACE = 12


def evaluator_keys(budget: Budget) -> AttributeKeys:
    """The attributes judging reads: the budget's selectors and first-token marks, vLLM's
    phase times, what tells an LLM call and its streaming (llm_calls), what tells the
    instrumentation (recognize), and the load tester's ids a verdict carries. A later
    step would have the evaluator say this itself."""
    names: set[str] = {
        GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN,
        GEN_AI_LATENCY_TIME_IN_QUEUE,
        GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
        GEN_AI_OPERATION_NAME,
        llm_calls.LLM_REQUEST_TYPE,
        llm_calls.INVOCATION_PARAMETERS,
        llm_calls.OPENINFERENCE_KIND,
        llm_calls.ASGI_EVENT,
        *llm_calls.MODEL_KEYS,
        *(name for _, names in llm_calls.COUNTS for name in names),
        *llm_calls.STREAM_FLAGS,
        recognize.OPENLIT_SDK[0],
        *(key for key, _ in recognize.ATTRIBUTE_KEYS),
    }
    selectors: list[Selector] = [sel for stage in budget.stages for sel in stage.selectors]
    for mark in budget.first_token:
        if mark.attribute is not None:
            names.add(mark.attribute)
        selectors += [*mark.match, *(s for s in (mark.anchor, mark.first_child) if s)]
    for selector in selectors:
        names.update(selector.attributes)
    return AttributeKeys(names=frozenset(names), prefixes=(LOADTEST_PREFIX,))


def read_in_place(body: bytes) -> None:
    """What the evaluator needs, read off upb's message and dropped: the ceiling of
    reading protobuf's message in place instead of converting it."""
    wanted = {"gen_ai.operation.name", "gen_ai.response.time_to_first_chunk"}
    for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
        for kv in resource_spans.resource.attributes:
            if kv.key in (SERVICE_NAME, HOST_NAME, HOST_ID):
                kv.value.string_value  # noqa: B018
        for scope_spans in resource_spans.scope_spans:
            scope_spans.scope.name  # noqa: B018
            for span in scope_spans.spans:
                span.trace_id, span.span_id, span.parent_span_id, span.name, span.kind  # noqa: B018
                span.start_time_unix_nano, span.end_time_unix_nano, span.status.code  # noqa: B018
                for kv in span.attributes:
                    if kv.key in wanted or kv.key.startswith(LOADTEST_PREFIX):
                        kv.value.string_value  # noqa: B018
                for event in span.events:
                    event.name, event.time_unix_nano  # noqa: B018


def best_seconds(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        began = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - began)
    return best


def bytes_per_span(make: Callable[[], object], spans: int) -> float:
    """Python heap held by what `make` returns, per span (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = make()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del held
    return (after - before) / spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--per-request", type=int, default=40, help="traces per request")
    parser.add_argument("--repeat", type=int, default=5, help="passes per row; best is kept")
    parser.add_argument("--memory-spans", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="a short run (CI)")
    args = parser.parse_args()
    if args.quick:
        args.traces, args.repeat, args.memory_spans = 400, 2, 4_800
    if not COMPILED:
        raise SystemExit("the compiled reader (_wire) is not built: `pip install -e .` with gcc")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    payloads = make_payloads(args.traces, args.per_request, 1)
    spans = args.traces * SPANS_PER_TRACE
    keys = evaluator_keys(load_budget(REPO / "budget.yaml").budget)
    compiled = SpanReader(keys, compiled=True)
    every = SpanReader(AttributeKeys(every=True), compiled=True)
    for body in payloads[:3]:  # the same records both ways, the same spans as today
        assert compiled.read(body, "bench") == records_from_protobuf(body, "bench", keys)
        today = spans_from_otlp(ExportTraceServiceRequest.FromString(body))
        assert every.read(body, "bench").to_spans() == today

    def each(read: Callable[[bytes], object]) -> Callable[[], None]:
        def run() -> None:
            for body in payloads:
                read(body)

        return run

    # (name, run, slow: best of fewer passes)
    rows = [
        ("(a) protobuf decode alone (upb)", each(ExportTraceServiceRequest.FromString), False),
        (
            "(b) decode + spans_from_otlp (the intake before)",
            each(lambda body: spans_from_otlp(ExportTraceServiceRequest.FromString(body))),
            True,
        ),
        ("(d) decode + upb read in place, nothing kept", each(read_in_place), True),
        (
            "(e) pure-Python records (decode + records_from_protobuf)",
            each(lambda body: records_from_protobuf(body, "bench", keys)),
            True,
        ),
        (
            "(c) compiled wire reader → records, evaluator's keys",
            each(lambda body: compiled.read(body, "bench")),
            False,
        ),
        (
            "(c) compiled wire reader → records, every key",
            each(lambda body: every.read(body, "bench")),
            False,
        ),
    ]
    rates = [
        spans / best_seconds(run, min(3, args.repeat) if slow else args.repeat)
        for _, run, slow in rows
    ]
    decode, today = rates[0], rates[1]
    request_bytes = sum(len(body) for body in payloads)
    table = Table(
        title=f"OTLP intake, one core: {args.traces:,} traces × 12 spans, {len(payloads)} "
        f"requests of {args.per_request} traces, {request_bytes / spans:.0f} bytes a span"
    )
    table.add_column("path")
    table.add_column("spans / s", justify="right")
    table.add_column("µs / span", justify="right")
    table.add_column("÷ decode", justify="right")
    table.add_column("÷ (b)", justify="right")
    for (name, _, _), rate in zip(rows, rates, strict=True):
        table.add_row(
            name, f"{rate:,.0f}", f"{1e6 / rate:.3f}", f"{rate / decode:.3f}", f"{rate / today:.2f}"
        )
    Console(width=140).print(table)

    per_request = args.per_request * SPANS_PER_TRACE
    held = [payloads[i % len(payloads)] for i in range(-(-args.memory_spans // per_request))]
    n = sum(len(compiled.read(body, "bench")) for body in held)
    data_per_span = sum(len(body) for body in held) / n
    as_spans = bytes_per_span(
        lambda: [spans_from_otlp(ExportTraceServiceRequest.FromString(b)) for b in held], n
    )
    as_wire_spans = bytes_per_span(lambda: [every.read(b, "bench").to_spans() for b in held], n)
    as_records = bytes_per_span(lambda: [compiled.read(b, "bench") for b in held], n)
    as_every = bytes_per_span(lambda: [every.read(b, "bench") for b in held], n)
    memory = Table(title=f"Memory per span held, {n:,} spans (tracemalloc)")
    memory.add_column("held as")
    memory.add_column("bytes / span", justify="right")
    memory.add_column("÷ Span objects", justify="right")
    for name, size in (
        ("Span objects by spans_from_otlp (the intake before)", as_spans),
        ("Span objects from the records (the intake now)", as_wire_spans),
        ("records, evaluator's keys", as_records),
        ("records, every key", as_every),
        ("records, evaluator's keys + the request bytes", as_records + data_per_span),
        ("records, every key + the request bytes", as_every + data_per_span),
    ):
        memory.add_row(name, f"{size:,.0f}", f"{size / as_spans:.2f}")
    Console(width=140).print(memory)
    Console(width=140).print(
        f"evaluator's keys: {len(keys.names)} names and the prefix {keys.prefixes[0]!r}"
        f" (bench.wire.evaluator_keys); the request bytes are {data_per_span:.0f} a span."
    )
    record(
        "wire",
        "OTLP protobuf → SpanRecords, compiled wire reader (evaluator's keys)",
        rates[4],
        "spans/s",
        aim="≥ 1,000,000 spans/s: at most a tenth of the 10 µs a span that issue 46's"
        " 100,000 spans/s allows",
        floor=today,
        floor_name="decode + spans_from_otlp",
        met=rates[4] >= 1_000_000,
    )
    record(
        "wire",
        "memory per span held: records + request bytes ÷ Span objects",
        (as_records + data_per_span) / as_spans,
        "x",
        aim="≤ 0.5 (issue 46)",
        met=(as_records + data_per_span) / as_spans <= 0.5,
    )


if __name__ == "__main__":
    main()
