"""The load generator is open loop: a stall cannot hide the requests due during it."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from spanbudget.collector.loadtest.client import ChatRequest
from spanbudget.collector.loadtest.runner import RunSettings, run_requests
from spanbudget.collector.loadtest.schedule import Arrival, Phase, build_schedule
from starlette.types import Receive, Scope, Send

from tests.support.servers import ServerThread
from tests.support.sse_server import Stall, serve, sse_app


def test_stall_shows_in_scheduled_time_latency() -> None:
    stall = Stall(start_s=0.5, length_s=1.0)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    schedule = build_schedule([Phase("main", 20, duration_s=2.0)], Arrival.CONSTANT)
    requests = [ChatRequest(i, phase, at, "hi", 4) for i, (at, phase) in enumerate(schedule)]
    with serve(sse_app(stall)) as base:
        settings = RunSettings(f"{base}/v1/chat/completions", "m", "run-co", max_concurrency=1)

        records = asyncio.run(run_requests(requests, settings, provider.get_tracer("t")))
    assert len(records) == 40
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    during = [r for r in records if 0.55 <= r.scheduled_s < 1.4]
    # Measured from the schedule, every request due during the stall waited for its end...
    for record in during:
        assert record.ttft_sched_ms is not None
        assert record.ttft_ms is not None
        waited_ms = (1.5 - record.scheduled_s) * 1000
        assert record.ttft_sched_ms >= waited_ms - 60, (record.scheduled_s, record.ttft_sched_ms)
    # ...while measured from the actual send, most of them look fast: they were sent late,
    # after the one request that sat through the stall (the coordinated-omission trap).
    fast_from_send = [r for r in during if r.ttft_ms is not None and r.ttft_ms < 200]
    assert len(fast_from_send) >= len(during) - 2
    assert max(r.ttft_sched_ms or 0 for r in records) >= 850
    # Every request is a root CLIENT span per DESIGN §3, ended, with its first-chunk time.
    spans = exporter.get_finished_spans()
    assert len(spans) == 40
    span = spans[0]
    assert span.name == "chat m"
    assert span.kind is SpanKind.CLIENT
    assert span.parent is None
    attributes = dict(span.attributes or {})
    assert attributes["loadtest.run_id"] == "run-co"
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.stream"] is True
    assert 0 < float(attributes["gen_ai.response.time_to_first_chunk"]) < 5  # type: ignore[arg-type]
    assert {f"{s.context.trace_id:032x}" for s in spans} == {r.trace_id for r in records}


def test_schedule_is_fixed_and_reproducible() -> None:
    phases = [Phase("nominal", 10, duration_s=5), Phase("burst", 50, duration_s=1)]
    first = build_schedule(phases, Arrival.POISSON, seed=3)
    assert first == build_schedule(phases, Arrival.POISSON, seed=3)
    assert first != build_schedule(phases, Arrival.POISSON, seed=4)
    nominal = [t for t, p in first if p == "nominal"]
    burst = [t for t, p in first if p == "burst"]
    assert all(0 <= t < 5 for t in nominal)
    assert all(5 <= t < 6 for t in burst)
    assert 25 <= len(nominal) <= 80
    assert 25 <= len(burst) <= 80
    constant = build_schedule([Phase("c", 4, requests=5)], Arrival.CONSTANT)
    assert [t for t, _ in constant] == [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.timing  # each request ends within the 20 ms before the next is due
def test_requests_one_after_another_share_one_connection() -> None:
    """Each stream is read to its end, so its connection goes back to the pool: a new TCP
    handshake per request would land in every request's time to first token."""
    clients: set[tuple[str, int]] = set()
    app = sse_app(Stall())

    async def counting(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("client"):
            clients.add(tuple(scope["client"]))
        await app(scope, receive, send)

    requests = [ChatRequest(i, "main", i * 0.02, "hi", 4) for i in range(20)]
    with ServerThread(counting) as server:
        settings = RunSettings(f"{server.url}/v1/chat/completions", "m", "run-keepalive")
        records = asyncio.run(run_requests(requests, settings, TracerProvider().get_tracer("t")))
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    assert len(clients) == 1, sorted(clients)
