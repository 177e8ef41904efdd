"""Known traffic for the Collector tests: reference-path traces with random stage times,
sent over OTLP/HTTP as an SDK sends them."""

from __future__ import annotations

import random
import time
from dataclasses import replace

import httpx

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


def send(client: httpx.Client, url: str, traces: list[TraceBuilder]) -> None:
    """One OTLP/HTTP export of these traces; a refusal is retried as an SDK would."""
    body = to_request([span for trace in traces for span in trace.spans]).SerializeToString()
    for _ in range(50):
        answer = client.post(
            f"{url}/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}
        )
        if answer.status_code == 200:
            return
        time.sleep(0.2)
    answer.raise_for_status()
