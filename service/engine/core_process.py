"""The engine core in a process of its own, as vLLM V1 runs EngineCore apart from its API server.

No frontend thread can hold the interpreter lock when a step ends: the core process only
schedules and sleeps, and sends each step's tokens, timings and stats over a pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
from collections import deque
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from .core_priority import CorePriority
from .engine_loop import (
    EngineDead,
    EngineLoop,
    StallSource,
    StepObserver,
    StepRecord,
    TokenSink,
)
from .perf_model import PerfModel
from .presets import Preset
from .scheduler import Scheduler, SchedulerStats, Sequence, TokenEvent

__all__ = ["ProcessEngineLoop"]

_log = logging.getLogger("spanbudget.engine")
_STARTUP_TIMEOUT_SECONDS = 60


# What crosses the pipe, core to frontend, besides the step record: named, so that the two
# sides cannot drift apart field by field.
class _TokenRow(NamedTuple):
    """One token of one request, with the request's engine-core timestamps after it."""

    request_id: str
    token_index: int
    time: float
    finished: bool
    queued_ts: float | None
    scheduled_ts: float | None
    prefilled_ts: float | None
    kv_sent_ts: float | None
    kv_arrived_ts: float | None
    first_token_ts: float | None
    last_token_ts: float | None
    finished_ts: float | None
    num_output: int


class _Summary(NamedTuple):
    """The scheduler's state after a step (or an idle change), for the load gauges."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    num_preemptions: int
    new_preemptions: list[str]


class _PipeCore(EngineLoop):
    """`EngineLoop` inside the core process: commands come from, and steps go to, a pipe."""

    def __init__(
        self,
        scheduler: Scheduler,
        conn: Connection,
        stall_seconds: StallSource,
        priority: CorePriority,
    ) -> None:
        super().__init__(
            scheduler,
            stall_seconds=stall_seconds,
            observers=(self,),
            keep_records=1,
            priority=priority,
        )
        self._conn = conn
        self._by_id: dict[str, Sequence] = {}
        self._record: StepRecord | None = None
        self.outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._preemptions_sent = 0
        self._counts_sent: tuple[int, int, float] = (0, 0, 0.0)

    def on_step(self, record: StepRecord, stats: SchedulerStats) -> None:
        self._record = record

    def on_idle(self, stats: SchedulerStats) -> None:
        pass  # `_post` sends changed counts even without a step (an abort while idle)

    def _failed(self, exc: Exception) -> None:
        raise exc  # the process ends with its traceback; the frontend sees the pipe close

    def _started(self, scheduling: str, thread_id: int) -> None:
        # Logging is not set up in this process: the frontend logs it.
        self.scheduling, self.step_thread_id = scheduling, thread_id
        self.outbox.put(("started", scheduling, thread_id))

    def _drain(self, *, block: bool, timeout: float | None, step_end: float | None) -> bool:
        if not self._conn.poll(timeout if block else 0):
            return True
        while True:
            try:
                message = self._conn.recv()
            except EOFError:
                return False
            if message is None:
                return False
            if message[0] == "add":
                seq = message[1]  # a copy of the frontend's Sequence, fresh
                self._by_id[seq.request_id] = seq
                self._enqueue(seq, step_end)
            else:
                found = self._by_id.pop(message[1], None)
                if found is not None and not found.finished:
                    self.scheduler.abort(found)
            if not self._conn.poll(0):
                return True

    @staticmethod
    def _counts(stats: SchedulerStats) -> tuple[int, int, float]:
        return stats.num_running, stats.num_waiting, stats.kv_cache_usage

    def _post(self, events: list[TokenEvent]) -> None:
        record, self._record = self._record, None
        stats = self.scheduler.stats
        if record is None and not events and self._counts(stats) == self._counts_sent:
            return
        self._counts_sent = self._counts(stats)
        new = stats.num_preemptions - self._preemptions_sent
        self._preemptions_sent = stats.num_preemptions
        rows = []
        for event in events:
            s = event.sequence
            if event.finished:
                self._by_id.pop(s.request_id, None)
            rows.append(
                _TokenRow(s.request_id, event.index, event.time, event.finished, s.queued_ts,
                          s.scheduled_ts, s.prefilled_ts, s.kv_sent_ts, s.kv_arrived_ts,
                          s.first_token_ts, s.last_token_ts, s.finished_ts, s.num_output)
            )  # fmt: skip
        summary = _Summary(
            stats.num_running,
            stats.num_waiting,
            stats.kv_cache_usage,
            stats.num_preemptions,
            list(stats.recent_preemptions)[-new:] if new else [],
        )
        self.outbox.put((record, summary, rows))

    def send_forever(self) -> None:
        """Runs on a thread of its own: a frontend slow to read must not stall the steps."""
        while (message := self.outbox.get()) is not None:
            try:
                self._conn.send(message)
            except OSError:
                return


def _core_main(
    preset: Preset,
    stall_seconds: StallSource,
    priority: CorePriority,
    conn: Connection,
) -> None:
    # The frontend stops the core through the pipe, or by ending (the pipe then closes).
    # Signals to the engine's process group (Ctrl-C, the demo's or a supervisor's SIGTERM)
    # must not end it first, or the frontend would take a normal stop for a crash: a
    # session of its own keeps them away. A SIGTERM sent to this process alone still ends it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setsid()
    core = _PipeCore(Scheduler(PerfModel(preset)), conn, stall_seconds, priority)
    # Process-wide tuning, hence here at this process's entry point: start-up objects stay
    # out of the garbage collector's way, and the step thread gets the interpreter lock back
    # from the sender thread within half a millisecond, not the default 5 ms.
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(0.0005)
    # Started before the step loop asks for its priority, so the sender keeps a normal one.
    sender = threading.Thread(target=core.send_forever, name="engine-core-send", daemon=True)
    sender.start()
    try:
        core._run()
    finally:
        core.outbox.put(None)
        sender.join(timeout=5)


class ProcessEngineLoop:
    """The frontend's handle on a core process; same interface as `EngineLoop`.

    It mirrors what the core reports: each request's timestamps onto the frontend's
    `Sequence`, and the scheduler's counts into `stats` for the step observers (metrics).
    """

    def __init__(
        self,
        preset: Preset,
        *,
        stall_seconds: StallSource,
        observers: tuple[StepObserver, ...] = (),
        keep_records: int = 100_000,
        priority: CorePriority = "normal",
    ) -> None:
        self.stats = SchedulerStats()
        # What the core's step thread runs at, and its OS thread id, once it has started.
        self.scheduling: str | None = None
        self.step_thread_id: int | None = None
        self.dead: EngineDead | None = None  # set once the core process is gone unasked
        self._stopping = False
        self._priority: CorePriority = priority
        self._preset = preset
        self._stall_seconds = stall_seconds
        self._observers = observers
        self._records: deque[StepRecord] = deque(maxlen=keep_records)
        self._sinks: dict[str, tuple[Sequence, TokenSink]] = {}
        self._conn: Connection | None = None
        self._process: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._process is not None:
            raise RuntimeError("the engine core is already running")
        context = multiprocessing.get_context("spawn")  # never fork a threaded server
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_core_main,
            args=(self._preset, self._stall_seconds, self._priority, child),
            name="engine-core",
            daemon=True,
        )
        self._process.start()
        child.close()
        # Like vLLM's handshake with its engine core: serve only once the core is stepping,
        # so that the first requests' queue time is not the core's start-up.
        if not self._conn.poll(_STARTUP_TIMEOUT_SECONDS):
            self._process.kill()
            raise RuntimeError(f"the engine core did not start in {_STARTUP_TIMEOUT_SECONDS} s")
        self._on_started(self._conn.recv())
        self._loop = loop
        loop.add_reader(self._conn.fileno(), self._on_readable)

    async def stop(self) -> None:
        if self._process is None or self._conn is None or self._loop is None:
            return
        self._stopping = True
        self._loop.remove_reader(self._conn.fileno())
        with contextlib.suppress(OSError):  # the core may be gone already
            self._conn.send(None)
        await asyncio.to_thread(self._process.join, 10)
        if self._process.is_alive():
            self._process.kill()
        self._conn.close()
        self._process = None

    def submit(self, seq: Sequence, sink: TokenSink) -> None:
        if self.dead is not None:
            raise self.dead
        if self._conn is None:
            raise RuntimeError("the engine core is not running")
        self._sinks[seq.request_id] = (seq, sink)
        try:
            self._send_add(seq)
        except OSError:  # the core died and the frontend has not read the end of the pipe yet
            self._core_gone()
            raise self.dead or EngineDead("engine core process is gone") from None

    def _send_add(self, seq: Sequence) -> None:
        assert self._conn is not None
        self._conn.send(("add", seq))

    def abort(self, seq: Sequence) -> None:
        if self._sinks.pop(seq.request_id, None) is not None and self._conn is not None:
            with contextlib.suppress(OSError):  # a dead core has nothing left to abort
                self._conn.send(("abort", seq.request_id))

    def _core_gone(self) -> None:
        """The core process ended without being asked to: fail every open stream."""
        if self._stopping or self.dead is not None:
            return
        code = self._process.exitcode if self._process is not None else None
        self.dead = EngineDead(f"engine core process ended (exit code {code})")
        _log.error("%s; the engine serves no more requests", self.dead)
        sinks, self._sinks = [sink for _, sink in self._sinks.values()], {}
        for sink in sinks:
            sink.on_engine_dead(self.dead)

    def records(self) -> list[StepRecord]:
        return list(self._records)

    def _on_readable(self) -> None:
        assert self._conn is not None
        while self._conn.poll():
            try:
                message = self._conn.recv()
            except EOFError:
                if self._loop is not None:
                    self._loop.remove_reader(self._conn.fileno())
                self._core_gone()
                return
            record, summary, rows = message
            self.stats.num_running = summary.num_running
            self.stats.num_waiting = summary.num_waiting
            self.stats.kv_cache_usage = summary.kv_cache_usage
            self.stats.num_preemptions = summary.num_preemptions
            self.stats.recent_preemptions.extend(summary.new_preemptions)
            if record is not None:
                self._records.append(record)
                for observer in self._observers:
                    observer.on_step(record, self.stats)
            elif not rows:
                for observer in self._observers:
                    observer.on_idle(self.stats)
            for row in rows:
                self._deliver(row)

    def _on_started(self, message: tuple[str, str, int]) -> None:
        _, self.scheduling, self.step_thread_id = message
        _log.info("engine core process, step thread %d: %s", self.step_thread_id, self.scheduling)

    def _deliver(self, row: _TokenRow) -> None:
        # An aborted request (client gone) has no sink any more; its last tokens are dropped.
        sinks = self._sinks
        entry = sinks.pop(row.request_id, None) if row.finished else sinks.get(row.request_id)
        if entry is None:
            return
        seq, sink = entry
        seq.queued_ts, seq.scheduled_ts = row.queued_ts, row.scheduled_ts
        seq.prefilled_ts, seq.first_token_ts = row.prefilled_ts, row.first_token_ts
        seq.kv_sent_ts, seq.kv_arrived_ts = row.kv_sent_ts, row.kv_arrived_ts
        seq.last_token_ts, seq.finished_ts = row.last_token_ts, row.finished_ts
        seq.num_output = row.num_output
        sink.on_token(TokenEvent(seq, row.token_index, row.time, row.finished))
