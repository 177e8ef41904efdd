"""The open-loop dispatcher: sends each request at its scheduled time, whatever came before."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from opentelemetry import trace

from .client import ChatRequest, RequestRecord, send_chat
from .http1 import StreamingClient
from .idle_gc import IdleCollections

__all__ = ["Progress", "RunSettings", "run_requests"]


@dataclass(frozen=True, slots=True)
class RunSettings:
    url: str  # the chat completions URL
    model: str
    run_id: str
    max_concurrency: int = 256
    api_key: str | None = None
    timeout_s: float = 60.0
    delay: str = ""  # the fault header's value on every request (`client.parse_delay`)


@dataclass(slots=True)
class Progress:
    """Live counters for a progress display; updated by the run, read by anyone."""

    total: int
    sent: int = 0
    finished: int = 0
    errors: int = 0


_SPIN_S = 0.0015
SWITCH_INTERVAL_S = 0.0005


@contextlib.contextmanager
def quick_gil_handoff(interval_s: float = SWITCH_INTERVAL_S) -> Iterator[None]:
    """Let the dispatcher have the interpreter lock within `interval_s` of asking.

    Another thread that holds the lock, such as the span exporter encoding a batch, keeps
    it for up to the switch interval (5 ms by default), and a send due meanwhile waits.
    At 0.5 ms the p99 send lag at 200 requests/s fell from 1.88–2.16 to 1.54–1.65 ms
    (three runs each, bench/loadgen.py's target, spans kept in memory), with the same CPU.
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


async def _sleep_until(due: float) -> None:
    """Sleep to `due` (perf_counter time) within a fraction of a millisecond.

    The event loop's timers wake up to a millisecond late (epoll rounds timeouts up), so
    sleep to just short of the mark, then yield to other tasks until it is reached.
    """
    delay = due - time.perf_counter()
    if delay > _SPIN_S:
        await asyncio.sleep(delay - _SPIN_S)
    while time.perf_counter() < due:
        await asyncio.sleep(0)


async def run_requests(
    requests: Sequence[ChatRequest],
    settings: RunSettings,
    tracer: trace.Tracer,
    *,
    client: StreamingClient | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    progress: Progress | None = None,
) -> list[RequestRecord]:
    """Send every request at `scheduled_s` after the start; return the records by index.

    With `max_concurrency` requests in flight, the next one waits for a slot; its
    scheduled-time latency then includes that wait, as a user's would.
    """
    progress = progress or Progress(len(requests))
    slots = asyncio.Semaphore(settings.max_concurrency)
    records: list[RequestRecord] = []
    client = client or StreamingClient(
        settings.max_concurrency, connect_timeout_s=10.0, read_timeout_s=settings.timeout_s
    )
    with IdleCollections() as collections, quick_gil_handoff():
        async with client:
            start = time.perf_counter()

            async def one(request: ChatRequest) -> None:
                async with slots:
                    progress.sent += 1
                    record = await send_chat(
                        client,
                        tracer,
                        request,
                        url=settings.url,
                        model=settings.model,
                        run_id=settings.run_id,
                        run_start_perf=start,
                        api_key=settings.api_key,
                        delay=settings.delay,
                    )
                progress.finished += 1
                progress.errors += not record.ok
                records.append(record)
                if on_record is not None:
                    on_record(record)

            tasks: list[asyncio.Task[None]] = []
            for request in sorted(requests, key=lambda r: r.scheduled_s):
                due = start + request.scheduled_s
                collections.idle(due - time.perf_counter())
                await _sleep_until(due)
                tasks.append(asyncio.create_task(one(request)))
            await asyncio.gather(*tasks)
    records.sort(key=lambda r: r.index)
    return records
