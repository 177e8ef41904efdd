"""Collector throughput on one core: OTLP protobuf intake → assembly → evaluation → store.

Run: .venv/bin/python bench/pipeline.py [--traces 20000] [--per-request 40] [--quick]

12-span traces of the reference path, encoded as OTLP protobuf requests, measured side by
side in one run: the raw protobuf decode of the same payloads (best of 5), decode plus
conversion to spans (best of 3: the floor of the collector's own work, which every
figure is a ratio to), the same by the compiled OTLP wire reader (its records, then
their spans: what the intake does now), the full in-process pipeline (decode, intake
journal, queue, tail-based assembly, evaluation, metrics, SQLite WAL store) with
CPython's default GC and then with the GC settings `spanbudget collect` applies
(`live/gc_settings.py`), the same without the intake journal and without the revision
memory (their costs), the same with the protobuf package reading the bodies instead of
the wire reader and with the pure-Python evaluator where the compiled one is built (each
before and after, in one run), keeping spans for the web UI, `collect`'s default
configuration (spans kept, the alert rules on, each trace judged by the preset its
instrumentation calls for), and the same through each transport, side by side:
OTLP/HTTP (uvicorn, httpx posting the bodies) and OTLP/gRPC (grpcio's asyncio server on
the same event loop, a grpcio client sending the same bodies), the sending client in the
same process on the same core for both. Each row gives spans per second of wall time and
per CPU-second of the process (every thread: the client's too, where there is one).
`--quick` judges a few hundred traces: it checks the bench runs, not its numbers.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import grpc
import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from rich.console import Console
from rich.table import Table
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.intake.grpc_server import EXPORT_METHOD
from spanbudget.collector.judging.evaluate import COMPILED, Evaluator
from spanbudget.collector.live.app import app_for
from spanbudget.collector.live.gc_settings import tune_for_throughput
from spanbudget.collector.live.pipeline import Pipeline, assemble
from spanbudget.collector.live.settings import CollectorSettings
from spanbudget.collector.readers import spans_from_otlp
from spanbudget.collector.readers.span_records import AttributeKeys, SpanReader
from spanbudget.collector.spans import Span

from tests.support.otlp import to_request
from tests.support.servers import ServerThread
from tests.support.traces import rag_trace

sys.path.insert(0, str(REPO / "bench"))
from bench_summary import record

PROTOBUF = "application/x-protobuf"


def make_payloads(traces: int, per_request: int, tag: int) -> list[bytes]:
    """Requests of `per_request` whole 12-span traces each; trace ids unique per `tag`."""
    payloads = []
    batch: list[Span] = []
    for i in range(traces):
        builder = rag_trace(
            trace_id=f"{tag:04x}{i:028x}", retrieval=i % 40, prefill=(i * 7) % 50, queue=i % 30
        )
        builder.add("stream.forward", 150, 300, parent=builder.spans[1].span_id)
        assert len(builder.spans) == 12
        batch += builder.spans
        if len(batch) >= per_request * 12:
            payloads.append(to_request(batch).SerializeToString())
            batch = []
    if batch:
        payloads.append(to_request(batch).SerializeToString())
    return payloads


def timed(run: Callable[[], object]) -> tuple[float, float]:
    """Wall seconds and the process's CPU seconds (all its threads) of one `run()`."""
    start, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - start, time.process_time() - cpu


def best(run: Callable[[], object], times: int) -> tuple[float, float]:
    return min((timed(run) for _ in range(times)), key=lambda measured: measured[0])


def build_pipeline(
    db: Path,
    spans: int,
    *,
    keep_spans: bool = False,
    compiled: bool | None = None,
    journal: bool = True,
    revise: bool = True,
    grpc: bool = False,
    reader: SpanReader | None = None,
    default: bool = False,
) -> Pipeline:
    """The collector as `spanbudget collect` assembles it, without the alert rules; its
    queue and buffer hold the whole run, and it keeps spans only when asked; with `grpc`,
    OTLP/gRPC on a free port of 127.0.0.1 (the app's lifespan starts it). With `default`,
    as `collect` runs by default: spans kept for the web UI, the alert rules on, each trace
    judged by the preset its instrumentation calls for (`Judges`)."""
    settings = CollectorSettings.from_flat(
        grpc_listen="127.0.0.1:0" if grpc else "off",
        db_path=db,
        journal=journal,
        revise_seconds=60.0 if revise else 0.0,
        budget_path=REPO / "budget.yaml",
        decision_wait_seconds=0.0,
        intake_queue_spans=spans + 1,
        max_traces=spans,
        retention_seconds=86400,
        retention_count=10_000_000,
        span_retention_count=100_000 if keep_spans or default else 0,
    )
    budget = load_budget(REPO / "budget.yaml").budget
    if default:
        pipeline = assemble(settings, budget, reader=reader)
    else:
        pipeline = assemble(
            settings,
            budget,
            alerts=False,
            make_evaluator=partial(Evaluator, compiled=compiled),
            reader=reader,
        )
    pipeline.start()
    return pipeline


def stored(pipeline: Pipeline) -> int:
    return int(pipeline.store.summary()["traces"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=int, default=20_000)
    parser.add_argument("--per-request", type=int, default=40, help="traces per request")
    parser.add_argument("--quick", action="store_true", help="a short run (CI)")
    args = parser.parse_args()
    if args.quick:
        args.traces = 400
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, all threads
    spans = args.traces * 12
    payloads = make_payloads(args.traces, args.per_request, 1)
    gc_payloads = make_payloads(args.traces, args.per_request, 3)
    http_payloads = make_payloads(args.traces, args.per_request, 2)
    grpc_payloads = make_payloads(args.traces, args.per_request, 4)

    def decode_only() -> None:
        for body in payloads:
            ExportTraceServiceRequest.FromString(body)

    def decode_convert() -> None:
        for body in payloads:
            spans_from_otlp(ExportTraceServiceRequest.FromString(body))

    wire = SpanReader(AttributeKeys(every=True))

    def wire_convert() -> None:
        for body in payloads:
            wire.read(body, "bench").to_spans()

    rows: list[tuple[str, tuple[float, float]]] = [
        ("protobuf decode (floor)", best(decode_only, 5)),
        ("decode + convert to spans (floor)", best(decode_convert, 3)),
    ]
    if wire.compiled:
        rows.append(("… by the wire reader, records then spans", best(wire_convert, 3)))

    with tempfile.TemporaryDirectory() as tmp:

        def in_process(pipeline: Pipeline, bodies: list[bytes] = payloads) -> None:
            for body in bodies:  # as the HTTP route takes a body: decode, journal, queue
                pipeline.intake.receive(body, content_type=PROTOBUF, content_encoding=None)
            assert pipeline.core.wait_idle(600)

        pipeline = build_pipeline(Path(tmp) / "g.db", spans)
        rows.append(
            (
                "full pipeline, in-process, default GC",
                timed(lambda: in_process(pipeline, gc_payloads)),
            )
        )
        pipeline.close()
        del pipeline
        gc.collect()
        tune_for_throughput()  # as `spanbudget collect` runs, from here on

        pipeline = build_pipeline(Path(tmp) / "a.db", spans)
        path = "compiled evaluator" if COMPILED else "pure-Python evaluator (compiled not built)"
        rows.append((f"full pipeline, in-process, {path}", timed(lambda: in_process(pipeline))))
        judged_a = stored(pipeline)
        pipeline.close()
        headline = len(rows) - 1

        # The durable intake's cost: the same run without the journal, side by side.
        unjournaled = build_pipeline(Path(tmp) / "j" / "a.db", spans, journal=False)
        rows.append(("… without the intake journal", timed(lambda: in_process(unjournaled))))
        assert stored(unjournaled) == args.traces
        unjournaled.close()
        journal_cost = 1 - rows[-1][1][0] / rows[headline][1][0]

        # Keeping decided traces' spans to revise them with late spans: its cost, likewise.
        unrevised = build_pipeline(Path(tmp) / "r" / "a.db", spans, revise=False)
        rows.append(("… without the revision memory", timed(lambda: in_process(unrevised))))
        assert stored(unrevised) == args.traces
        unrevised.close()
        revise_cost = 1 - rows[-1][1][0] / rows[headline][1][0]

        if wire.compiled:  # the protobuf package reading the bodies: before the wire reader
            upb = SpanReader(AttributeKeys(every=True), compiled=False)
            before = build_pipeline(Path(tmp) / "u" / "a.db", spans, reader=upb)
            rows.append(
                ("… the protobuf package reading the bodies", timed(lambda: in_process(before)))
            )
            assert stored(before) == args.traces
            before.close()
            reader_gain = rows[-1][1][0] / rows[headline][1][0]

        if COMPILED:  # the release before, and installs where no C compiler built it
            pure = build_pipeline(Path(tmp) / "p" / "a.db", spans, compiled=False)
            rows.append(
                (
                    "full pipeline, in-process, pure-Python evaluator",
                    timed(lambda: in_process(pure)),
                )
            )
            assert stored(pure) == args.traces
            pure.close()

        keeping = build_pipeline(Path(tmp) / "k" / "a.db", spans, keep_spans=True)
        kept = keeping.spans
        assert kept is not None

        def in_process_keeping() -> None:
            in_process(keeping)
            assert kept.wait_idle(600)  # the span store writes on its own thread

        rows.append(("… keeping spans for the web UI", timed(in_process_keeping)))
        assert kept.count == args.traces
        keeping.close()

        # As `collect` runs by default: spans kept, alert rules on, presets recognised.
        usual = build_pipeline(Path(tmp) / "d" / "a.db", spans, default=True)
        usual_spans = usual.spans
        assert usual_spans is not None

        def in_process_default() -> None:
            in_process(usual)
            assert usual_spans.wait_idle(600)

        rows.append(("collect's default configuration, in-process", timed(in_process_default)))
        assert stored(usual) == args.traces
        usual.close()
        default_row = len(rows) - 1

        # Through each transport, as `collect` runs by default (issue 46's aim is for that).
        pipeline = build_pipeline(Path(tmp) / "b.db", spans, default=True)
        with (
            ServerThread(app_for(pipeline)) as server,
            httpx.Client(base_url=server.url, timeout=60) as client,
        ):

            def over_http() -> None:
                for body in http_payloads:
                    response = client.post(
                        "/v1/traces", content=body, headers={"Content-Type": PROTOBUF}
                    )
                    assert response.status_code == 200, response.status_code
                assert pipeline.core.wait_idle(600)
                assert pipeline.spans is not None
                assert pipeline.spans.wait_idle(600)

            rows.append(("collect's default configuration, over OTLP/HTTP", timed(over_http)))
        judged_b = stored(pipeline)
        pipeline.close()
        http_row = len(rows) - 1

        pipeline = build_pipeline(Path(tmp) / "c.db", spans, grpc=True, default=True)
        with ServerThread(app_for(pipeline), lifespan="on") as server:  # starts OTLP/gRPC
            assert pipeline.grpc is not None
            with grpc.insecure_channel(pipeline.grpc.address) as channel:
                export = channel.unary_unary(EXPORT_METHOD)  # the bodies as they are

                def over_grpc() -> None:
                    for body in grpc_payloads:
                        export(body, timeout=60)
                    assert pipeline.core.wait_idle(600)
                    assert pipeline.spans is not None
                    assert pipeline.spans.wait_idle(600)

                rows.append(("collect's default configuration, over OTLP/gRPC", timed(over_grpc)))
        judged_c = stored(pipeline)
        pipeline.close()

    assert judged_a == judged_b == judged_c == args.traces, (judged_a, judged_b, judged_c)
    floor = spans / rows[0][1][0]
    converted = spans / rows[1][1][0]
    table = Table(
        title=f"Collector throughput, one core: {args.traces:,} traces × 12 spans, "
        f"{len(payloads)} requests of {args.per_request} traces"
    )
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    table.add_column("spans / s", justify="right")
    table.add_column("traces / s", justify="right")
    table.add_column("CPU s", justify="right")
    table.add_column("spans / CPU-s", justify="right")
    table.add_column("÷ decode", justify="right")
    table.add_column("÷ decode+convert", justify="right")
    for name, (seconds, cpu) in rows:
        rate = spans / seconds
        table.add_row(
            name,
            f"{seconds:.2f}",
            f"{rate:,.0f}",
            f"{rate / 12:,.0f}",
            f"{cpu:.2f}",
            f"{spans / cpu:,.0f}" if cpu else "-",
            f"{rate / floor:.4f}",
            f"{rate / converted:.3f}",
        )
    Console(width=140).print(table)
    full = spans / rows[headline][1][0]
    (http_s, http_cpu), (grpc_s, grpc_cpu) = rows[http_row][1], rows[-1][1]
    record(
        "pipeline",
        f"collector, in-process, one core, {path}",
        full,
        "spans/s",
        aim="≥ 50,000 spans/s (first bar 35,000)",
        floor=converted,
        floor_name="decode + convert",
        met=full >= 50_000,
    )
    usual_rate = spans / rows[default_row][1][0]
    record(
        "pipeline",
        "collect's default configuration (span store, journal, alerts, presets), in-process",
        usual_rate,
        "spans/s",
        aim="≥ 100,000 spans/s on one core (issue 46)",
        met=usual_rate >= 100_000,
    )
    http_rate = spans / rows[http_row][1][0]
    record(
        "pipeline",
        "collector over OTLP/HTTP end to end, one core (client included)",
        http_rate,
        "spans/s",
        aim="≥ 70,000 spans/s (issue 46)",
        met=http_rate >= 70_000,
    )
    record(
        "pipeline",
        "collector over OTLP/gRPC ÷ over OTLP/HTTP, spans per CPU-second (client included)",
        http_cpu / grpc_cpu,
        "x",
        aim="report",
    )
    Console(width=140).print(
        f"verdicts stored: {judged_a:,} (in-process), {judged_b:,} (OTLP/HTTP) and"
        f" {judged_c:,} (OTLP/gRPC). Full pipeline = decode, intake journal, intake queue,"
        " tail-based assembly, evaluation, metrics, SQLite WAL store; the default"
        " configuration adds the span store, the alert rules and the presets; over OTLP/HTTP"
        " it adds uvicorn and the sending httpx client, over OTLP/gRPC grpcio's server and its"
        f" client, on the same core. OTLP/gRPC ÷ OTLP/HTTP: {http_s / grpc_s:.2f}x the spans per"
        f" second, {http_cpu / grpc_cpu:.2f}x the spans per CPU-second. The intake journal"
        f" costs {journal_cost:.1%} of the in-process throughput, the revision memory (late"
        f" spans revise verdicts) {revise_cost:.1%}."
        + (
            f" The wire reader makes the full pipeline {reader_gain:.2f}x as fast as the"
            " protobuf package's messages do."
            if wire.compiled
            else ""
        )
    )


if __name__ == "__main__":
    main()
