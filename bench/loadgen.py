"""Load generator precision: lag between scheduled and actual send, at several open-loop rates.

Run: .venv/bin/python bench/loadgen.py [--seconds 5] [--quick]

The target is a trivial local SSE server in its own process (4 chunks per answer), so the
numbers are the generator's own: scheduling, the root span, the HTTP client, SSE parsing.
The floor, measured in the same run, is how late a bare `time.sleep(5 ms)` wakes up (p99):
no dispatcher in this process can be more punctual than the machine lets it sleep.

With two cores or more, the target runs on a core of its own and the generator on the
others. Unpinned, Linux often wakes the target on the generator's core when a request
arrives, and the generator then waits for the target's millisecond of work: two sends
0.2 ms apart went out 0.1 ms or 1.3–1.8 ms apart, at random, and always 0.1 ms with the
target pinned. A target on another machine, as in real use, cannot do that.
`--quick` (CI) runs each row for half a second: it checks the bench runs.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx
from bench_summary import record
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from rich.console import Console
from rich.table import Table
from spanbudget.collector.loadtest.client import ChatRequest
from spanbudget.collector.loadtest.runner import RunSettings, run_requests
from spanbudget.collector.loadtest.schedule import Arrival, Phase, build_schedule
from spanbudget.collector.stats import percentile

from tests.support.servers import free_port


def sleep_floor(seconds: float, step: float = 0.005) -> float:
    """p99 lateness (ms) of a bare `time.sleep(step)` on this machine now."""
    lates = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        time.sleep(step)
        lates.append((time.perf_counter() - start - step) * 1000)
    return percentile(sorted(lates), 99)


def _serve(port: int) -> None:
    import uvicorn

    from tests.support.sse_server import Stall, sse_app

    uvicorn.run(sse_app(Stall()), host="127.0.0.1", port=port, log_level="error")


def _wait_up(url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"server at {url} did not start")


def measure(base_url: str, rate: float, seconds: float, arrival: Arrival) -> dict[str, float]:
    schedule = build_schedule([Phase("p", rate, duration_s=seconds)], arrival, seed=1)
    requests = [ChatRequest(i, p, at, "hello", 4) for i, (at, p) in enumerate(schedule)]
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    settings = RunSettings(f"{base_url}/v1/chat/completions", "m", "bench")
    records = asyncio.run(run_requests(requests, settings, provider.get_tracer("bench")))
    provider.shutdown()
    lags = sorted((r.sent_s - r.scheduled_s) * 1000 for r in records)
    errors = sum(not r.ok for r in records)
    return {
        "requests": len(records),
        "errors": errors,
        "p50": percentile(lags, 50),
        "p99": percentile(lags, 99),
        "max": lags[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="a short run (CI)")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 0.5
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(port,), daemon=True)
    server.start()
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    if len(cores) >= 2 and server.pid is not None:
        os.sched_setaffinity(server.pid, {cores[-1]})
        os.sched_setaffinity(0, set(cores[:-1]))
    try:
        _wait_up(f"{base_url}/v1/models")
        table = Table(title=f"send lag behind schedule, {args.seconds:g} s per row")
        for column in ("arrival", "rate /s", "requests", "errors", "p50 ms", "p99 ms", "max ms"):
            table.add_column(column, justify="right")
        results = []
        for arrival in (Arrival.CONSTANT, Arrival.POISSON):
            for rate in (50.0, 200.0):
                r = measure(base_url, rate, args.seconds, arrival)
                results.append((arrival, rate, r))
                table.add_row(
                    arrival.value,
                    f"{rate:g}",
                    f"{r['requests']:.0f}",
                    f"{r['errors']:.0f}",
                    f"{r['p50']:.2f}",
                    f"{r['p99']:.2f}",
                    f"{r['max']:.2f}",
                )
        Console(width=140).print(table)
        low = next(r for a, rate, r in results if a is Arrival.POISSON and rate == 50.0)
        high = next(r for a, rate, r in results if a is Arrival.POISSON and rate == 200.0)
        floor = sleep_floor(max(1.0, args.seconds / 2))
        Console().print(
            f"p99 lag ratio, Poisson 200/s to 50/s: {high['p99'] / max(low['p99'], 1e-9):.2f}×;"
            f" floor: time.sleep(5 ms) wakes {floor:.2f} ms late at p99;"
            f" load average {os.getloadavg()[0]:.2f}"
        )
        record(
            "loadgen",
            "send lag p99, Poisson 200 req/s",
            high["p99"],
            "ms",
            aim="≤ 2 ms",
            floor=floor,
            floor_name="time.sleep(5 ms) lateness p99",
            met=high["p99"] <= 2,
        )
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
