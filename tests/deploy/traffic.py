"""Known traffic for the Collector tests: reference-path traces with random stage times,
sent over OTLP/HTTP as an SDK sends them."""

from __future__ import annotations

import random
import time

import httpx

from tests.support.otlp import to_request
from tests.support.traces import TraceBuilder, rag_trace

SPANS_PER_TRACE = len(rag_trace().spans)


def traffic(count: int, seed: int) -> list[TraceBuilder]:
    """Reference-path traces with random extra time per stage: ok, warn and overrun."""
    rng = random.Random(seed)
    traces = []
    for _ in range(count):
        extras = {
            stage: rng.choice([0.0, 0.0, 0.0, rng.uniform(0, 40)])
            for stage in ("network", "gateway", "retrieval", "prompt", "prefill")
        }
        traces.append(rag_trace(trace_id=f"{rng.getrandbits(128):032x}", **extras))
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
