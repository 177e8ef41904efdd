"""Benchmark of the RAG gateway: p50/p95 per stage at concurrency 1 and 10, and the cost of
tracing (SDK on vs OTEL_SDK_DISABLED=true, same run, interleaved).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/gateway.py [--data-dir ./data] [--requests 150]

Uses an ingested collection under --data-dir when there is one, otherwise a sample of the
default corpus ingested into a temp dir. The LLM is a zero-latency OpenAI-compatible stub
on 127.0.0.1, so the numbers are the gateway's own.
`--quick` ingests 3 documents into a temp dir and sends 10 requests per configuration: it
checks the bench runs (it still needs the reference models), not its numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The checkout beside this script comes first, so that a bench measures this code and not
# another installed copy of spanbudget (it runs an older checkout the same way).
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx
import uvicorn
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.core.processor import span_from_sdk
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.stats import percentile
from spanbudget.service import attributes as names
from spanbudget.service.embedding import SentenceTransformerEmbedder
from spanbudget.service.ingest import default_corpus, ingest
from spanbudget.service.settings import Settings
from spanbudget.service.tokens import load_tokenizer
from spanbudget.service.tracers import build_tracer_provider
from spanbudget.service.vectorstore import EdgeStore
from spanbudget.service.wiring import build_embedder, build_gateway, hnsw_params

from tests.support.servers import free_port

sys.path.insert(0, str(REPO / "bench"))
from bench_summary import record

QUESTIONS = [
    "How does a for loop work?",
    "What does the with statement do?",
    "How do I define a class with a custom __init__?",
    "What is the difference between is and ==?",
    "How do generators and yield work?",
    "How are exceptions raised and caught?",
    "What does the global statement do?",
    "How do I parse JSON?",
    "How do coroutines run in asyncio?",
    "What are f-strings?",
    "How do I read a CSV file?",
    "What does the assert statement do?",
    "How is operator precedence defined?",
    "How do lambda expressions work?",
    "What is a context manager?",
    "How do I match patterns with the match statement?",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def stub_llm(scope: Scope, receive: Receive, send: Send) -> None:
    """A zero-latency OpenAI-compatible streaming server (vLLM chunk format)."""
    if scope["type"] != "http":
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
        return
    while (await receive()).get("more_body"):
        pass
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        *({**head, "choices": [{"index": 0, "delta": {"content": w}}]} for w in ["An", " answer"]),
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}},
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})


def start_stub() -> tuple[subprocess.Popen[bytes], int]:
    """The stub in its own process, so it does not share the gateway's GIL (as an LLM won't)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, "--serve-stub", str(port)])
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process, port
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the stub LLM did not start") from None
            time.sleep(0.05)


def open_store(args: argparse.Namespace) -> EdgeStore:
    settings = Settings(_env_file=None, data_dir=args.data_dir)
    store = EdgeStore(
        settings.shard_path,
        collection=settings.collection,
        dimension=384,
        hnsw=hnsw_params(settings),
    )
    if store.exists():
        print(f"collection: {store.count()} chunks under {settings.shard_path}")
        return store
    embedder = SentenceTransformerEmbedder()
    tmp = Path(tempfile.mkdtemp(prefix="spanbudget-bench-"))
    store = EdgeStore(
        tmp / settings.collection,
        collection=settings.collection,
        dimension=embedder.dimension,
        hnsw=hnsw_params(settings),
    )
    docs = list(itertools.islice(default_corpus(), args.sample_documents))
    report = ingest(docs, embedder, store)
    print(
        f"collection: {report.chunks} chunks (sample of the default corpus, ingested in "
        f"{report.seconds:.0f} s; pass --data-dir with an ingested corpus for the full one)"
    )
    return store


async def drive(client: httpx.AsyncClient, n: int, concurrency: int) -> list[float]:
    """Send n streamed requests, `concurrency` at a time; return client-side latencies (s)."""
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(i: int) -> None:
        body = {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
        }
        async with gate:
            start = time.perf_counter()
            response = await client.post("/v1/chat/completions", json=body)
            latencies.append(time.perf_counter() - start)
            assert response.status_code == 200, response.text
            assert response.text.endswith("data: [DONE]\n\n")

    await asyncio.gather(*(one(i) for i in range(n)))
    return latencies


def stage_times(spans: list[ReadableSpan], evaluator: Evaluator) -> dict[str, list[float]]:
    """Per trace: each stage's exclusive time on the critical path as the budget collector's
    evaluator judges it (server-only traces: no network stage), then the spans inside."""
    traces: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        traces[span.context.trace_id].append(span)
    out: dict[str, list[float]] = defaultdict(list)
    now = datetime.now(UTC)
    for trace_spans in traces.values():

        def named(prefix: str, trace_spans: list[ReadableSpan] = trace_spans) -> ReadableSpan:
            return next(s for s in trace_spans if s.name.startswith(prefix))

        def span_ms(prefix: str) -> float:
            span = named(prefix)
            assert span.start_time is not None
            assert span.end_time is not None
            return (span.end_time - span.start_time) / 1e6

        verdict = evaluator.evaluate([span_from_sdk(s) for s in trace_spans], evaluated_at=now)
        assert verdict is not None
        assert verdict.ttft_ms is not None
        stage_ms = {stage.name: stage.ms or 0.0 for stage in verdict.stages}

        out["gateway + auth"].append(stage_ms["gateway"])
        out["  gateway.validate (span)"].append(span_ms(names.SPAN_VALIDATE))
        out["  auth.verify (span)"].append(span_ms(names.SPAN_AUTH))
        out["retrieval"].append(stage_ms["retrieval"])
        out["  embeddings (span)"].append(span_ms("embeddings "))
        out["  embeddings.queue (span)"].append(span_ms(names.SPAN_EMBEDDINGS_QUEUE))
        out["  embeddings.loop_wait (span)"].append(span_ms(names.SPAN_EMBEDDINGS_LOOP_WAIT))
        attributes = named("embeddings ").attributes or {}
        out["  model call (compute_ms)"].append(float(attributes[names.EMBEDDINGS_COMPUTE_MS]))
        out["  queries in the call"].append(float(attributes[names.EMBEDDINGS_BATCH_SIZE]))
        out["  query (span)"].append(span_ms("query "))
        out["prompt"].append(stage_ms["prompt"])
        out["prefill (stub LLM, 1st chunk)"].append(stage_ms["prefill"])
        out["TTFT at the gateway"].append(verdict.ttft_ms)
    return out


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of unsorted values, as the collector computes percentiles."""
    return percentile(sorted(values), q * 100)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=Path("./data"))
    parser.add_argument(
        "--requests",
        type=int,
        default=150,
        help="requests at c=1 and for the tracing cost (c=10: ten times as many)",
    )
    parser.add_argument("--sample-documents", type=int, default=25)
    parser.add_argument("--serve-stub", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a short run (CI)")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.sample_documents = 10, 3
        args.data_dir = Path(tempfile.mkdtemp(prefix="spanbudget-bench-quick-"))
    if args.serve_stub:
        config = uvicorn.Config(stub_llm, port=args.serve_stub, log_level="critical", ws="none")
        await uvicorn.Server(config).serve()
        return

    t0 = time.perf_counter()
    # As `spanbudget serve` does: the query model in a process of its own (the SPANBUDGET_
    # EMBEDDING_* variables apply); the corpus is ingested with an in-process model.
    query_embedder, stop_embedder = build_embedder(Settings())
    counter = load_tokenizer()
    store = open_store(args)
    stub, port = start_stub()
    settings = Settings(
        _env_file=None,
        llm_base_url=f"http://127.0.0.1:{port}/v1",
        llm_model="m",
        rate_limit_per_second=1e6,
        rate_limit_burst=1_000_000,
        api_keys="bench-key",
    )

    exporter = InMemorySpanExporter()
    traced_provider = build_tracer_provider(
        "rag-gateway", processor=BatchSpanProcessor(exporter, max_queue_size=65536), env={}
    )
    os.environ["OTEL_SDK_DISABLED"] = "true"  # the SDK reads it when a provider is built
    try:
        off_provider = build_tracer_provider("rag-gateway", exporter=InMemorySpanExporter(), env={})
    finally:
        del os.environ["OTEL_SDK_DISABLED"]
    apps = {
        name: build_gateway(
            settings, provider, embedder=query_embedder, store=store, counter=counter
        )
        for name, provider in (("on", traced_provider), ("off", off_provider))
    }
    headers = {"Authorization": "Bearer bench-key"}
    clients = {
        name: httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://gw",
            headers=headers,
            timeout=60,
        )
        for name, app in apps.items()
    }
    for client in clients.values():  # warm-up: pools, JIT-ish caches, first-call paths
        await drive(client, 10, 2)
    traced_provider.force_flush()
    exporter.clear()

    evaluator = Evaluator(load_budget(REPO / "budget.yaml").budget)
    rows: dict[int, dict[str, list[float]]] = {}
    # At c=10 a request takes a few milliseconds of the run: ten times as many of them, so
    # that one stall of this shared machine does not make the p95 on its own.
    per_concurrency = {1: args.requests, 10: 10 * args.requests}
    for concurrency, count in per_concurrency.items():
        await drive(clients["on"], count, concurrency)
        traced_provider.force_flush()
        rows[concurrency] = stage_times(list(exporter.get_finished_spans()), evaluator)
        exporter.clear()

    # Tracing cost: alternate batches of 10 on/off at concurrency 1 so that drift on this
    # shared machine hits both; the median of the per-round differences resists outliers.
    latency: dict[str, list[float]] = {"on": [], "off": []}
    round_ms: dict[str, list[float]] = {"on": [], "off": []}
    round_cpu_ms: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(args.requests // 10):
        for name in ("on", "off"):
            started_cpu = time.process_time()
            batch = await drive(clients[name], 10, 1)
            if name == "on":  # the batch processor exports in its own thread: count it too
                traced_provider.force_flush()
            round_cpu_ms[name].append((time.process_time() - started_cpu) * 1e3 / len(batch))
            round_ms[name].append(statistics.fmean(batch) * 1e3)
            latency[name] += batch
    traced_provider.force_flush()
    spans_per_request = len(exporter.get_finished_spans()) / max(1, len(latency["on"]))

    print(
        f"\nRAG gateway, {os.cpu_count()} CPUs, {args.requests} requests at c=1, "
        f"{per_concurrency[10]} at c=10 (ms)"
    )
    print(f"{'stage':32} {'c=1 p50':>9} {'c=1 p95':>9} {'c=10 p50':>9} {'c=10 p95':>9}")
    for stage in rows[1]:
        a, b = rows[1][stage], rows[10][stage]
        print(
            f"{stage:32} {pct(a, 0.5):9.2f} {pct(a, 0.95):9.2f} {pct(b, 0.5):9.2f} "
            f"{pct(b, 0.95):9.2f}"
        )
    rounds = len(round_ms["on"])
    print(
        f"\ntracing cost per request (c=1, {rounds} interleaved rounds of 10 requests each, "
        f"{spans_per_request:.0f} spans/request)"
    )
    print(f"{'':32} {'p50 ms':>9} {'mean ms':>9} {'CPU ms':>9}")
    for name, label in (("on", "tracing on (SDK + batch)"), ("off", "OTEL_SDK_DISABLED=true")):
        values = latency[name]
        print(
            f"{label:32} {statistics.median(values) * 1e3:9.2f} "
            f"{statistics.fmean(values) * 1e3:9.2f} {statistics.median(round_cpu_ms[name]):9.2f}"
        )
    wall_diff = [a - b for a, b in zip(round_ms["on"], round_ms["off"], strict=True)]
    cpu_diff = [a - b for a, b in zip(round_cpu_ms["on"], round_cpu_ms["off"], strict=True)]
    print(
        f"{'difference (median of rounds)':32} {'':9} {statistics.median(wall_diff):9.2f} "
        f"{statistics.median(cpu_diff):9.2f}"
    )

    retrieval = rows[1].get("retrieval")
    if retrieval:
        record(
            "gateway",
            "retrieval stage p95, c=1",
            pct(retrieval, 0.95),
            "ms",
            aim="≤ 40 ms",
            met=pct(retrieval, 0.95) <= 40,
        )
    record(
        "gateway",
        "CPU per request, tracing on",
        statistics.median(round_cpu_ms["on"]),
        "ms",
        aim="tracing a small share",
        floor=statistics.median(round_cpu_ms["off"]),
        floor_name="OTEL_SDK_DISABLED=true",
    )

    for name, client in clients.items():
        await client.aclose()
        async with apps[name].router.lifespan_context(apps[name]):
            pass
    traced_provider.shutdown()
    stub.terminate()
    stub.wait(timeout=10)
    store.close()
    stop_embedder()
    print(f"\nbench wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
