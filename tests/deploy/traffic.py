"""Known traffic for the Collector tests: reference-path traces with random stage times,
sent over OTLP/HTTP as an SDK sends them, each trace whole or in parts."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import replace

import httpx
from spanbudget.collector.spans import Span

from tests.support.otlp import to_request
from tests.support.traces import T0_NS, TraceBuilder, rag_trace

SPANS_PER_TRACE = len(rag_trace().spans)


def traffic(count: int, seed: int, *, ended_ago_s: float | None = None) -> list[TraceBuilder]:
    """Reference-path traces with random extra time per stage: ok, warn and overrun.

    Their times are the builder's fixed origin, or with `ended_ago_s` moved to the present:
    one trace every 20 ms, the last one ended that many seconds ago (for Jaeger's search,
    which looks back from now)."""
    rng = random.Random(seed)
    traces = []
    for _ in range(count):
        extras = {
            stage: rng.choice([0.0, 0.0, 0.0, rng.uniform(0, 40)])
            for stage in ("network", "gateway", "retrieval", "prompt", "prefill")
        }
        traces.append(rag_trace(trace_id=f"{rng.getrandbits(128):032x}", **extras))
    if ended_ago_s is not None:
        last_end = T0_NS + max(span.end_ns - T0_NS for trace in traces for span in trace.spans)
        shift = time.time_ns() - round(ended_ago_s * 1e9) - last_end - count * 20_000_000
        for i, trace in enumerate(traces):
            moved = shift + i * 20_000_000
            trace.spans = [
                replace(span, start_ns=span.start_ns + moved, end_ns=span.end_ns + moved)
                for span in trace.spans
            ]
    return traces


def parts(trace: TraceBuilder, count: int) -> list[list[Span]]:
    """The trace's spans in `count` exports, children before parents, as the services of a
    request send them: each span leaves when it ends, after its children; the root last."""
    ordered = sorted(trace.spans, key=lambda span: (span.end_ns, span.parent_span_id is None))
    size = -(-len(ordered) // count)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def split_requests(
    traces: Sequence[TraceBuilder], *, per_request: int, lag: int = 2, pieces: int = 3
) -> list[list[Span]]:
    """Export requests that carry each trace in `pieces` parts, `lag` requests apart,
    children first: request i holds the first part of `per_request` new traces, the second
    part of those that began `lag` requests before, and so on. Nothing is whole in one."""
    batches = [traces[i : i + per_request] for i in range(0, len(traces), per_request)]
    split = [[parts(trace, pieces) for trace in batch] for batch in batches]
    requests: list[list[Span]] = []
    for i in range(len(batches) + lag * (pieces - 1)):
        spans: list[Span] = []
        for piece in range(pieces):
            began = i - piece * lag
            if 0 <= began < len(batches):
                spans += [span for trace in split[began] for span in trace[piece]]
        requests.append(spans)
    return requests


def send(client: httpx.Client, url: str, traces: list[TraceBuilder]) -> None:
    """One OTLP/HTTP export of these traces, each whole."""
    send_spans(client, url, [span for trace in traces for span in trace.spans])


def send_spans(client: httpx.Client, url: str, spans: Sequence[Span]) -> None:
    """One OTLP/HTTP export of `spans`; a refusal is retried as an SDK would."""
    body = to_request(spans).SerializeToString()
    for _ in range(50):
        answer = client.post(
            f"{url}/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}
        )
        if answer.status_code == 200:
            return
        time.sleep(0.2)
    answer.raise_for_status()
