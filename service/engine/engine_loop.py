"""The real-time driver of the scheduler: an engine-core loop that waits out each step.

As in vLLM V1, the engine core runs apart from the HTTP frontend, here on a thread (tokens
reach the asyncio loop through `call_soon_threadsafe`); core_process.py runs the same loop
in a process of its own. Each step starts where the previous one really ended, so lateness
never piles up; modelled against actual step times are kept for benchmarks.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..errors import ServiceError
from .core_priority import CorePriority, request_core_priority
from .scheduler import Scheduler, SchedulerStats, Sequence, TokenEvent

__all__ = [
    "EngineDead",
    "EngineLoop",
    "StallSource",
    "StepObserver",
    "StepRecord",
    "TokenSink",
    "no_stall",
]


def _sleep_until(deadline: float) -> None:
    """Wait until `time.monotonic()` (asyncio's clock too, and system-wide) reaches
    `deadline`; precise to about 0.1 ms on an idle core."""
    while (remaining := deadline - time.monotonic()) > 0:
        time.sleep(remaining)


class EngineDead(ServiceError, RuntimeError):
    """The engine core has stopped: no request in flight or to come can be served."""


class TokenSink(Protocol):
    """Receives one sequence's tokens, on the event loop, as the steps produce them; or,
    if the engine core dies first, the error that ends the sequence."""

    def on_token(self, event: TokenEvent) -> None: ...

    def on_engine_dead(self, error: EngineDead) -> None: ...


class StepObserver(Protocol):
    """Told of the scheduler's state on the engine-core thread; must be quick and thread-safe.

    `on_step` follows every step. `on_idle` comes each time the engine runs out of work, so
    that what changed without a step (a request aborted while nothing ran) is seen too.
    """

    def on_step(self, record: StepRecord, stats: SchedulerStats) -> None: ...

    def on_idle(self, stats: SchedulerStats) -> None: ...


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One executed step: what the model said it takes (stall included) and what it took."""

    start: float
    modelled_seconds: float
    actual_seconds: float
    stall_seconds: float
    num_seqs: int
    num_tokens: int


# (seconds since the engine started, the step's modelled seconds) -> extra seconds it stalls
StallSource = Callable[[float, float], float]


def no_stall(elapsed_seconds: float, step_seconds: float) -> float:
    return 0.0


_STOP = object()

_log = logging.getLogger("spanbudget.engine")


class EngineLoop:
    """Runs `scheduler` in real time on its own thread; hands tokens to sinks on `loop`.

    `submit` and `abort` are called from the event loop; the scheduler is touched only by
    the engine-core thread, which takes them as commands between steps.
    """

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        stall_seconds: StallSource = no_stall,
        observers: tuple[StepObserver, ...] = (),
        keep_records: int = 100_000,
        priority: CorePriority = "normal",
    ) -> None:
        self.scheduler = scheduler
        self._records: deque[StepRecord] = deque(maxlen=keep_records)
        self._records_lock = threading.Lock()
        self._stall_seconds = stall_seconds
        self._observers = observers
        self._sinks: dict[Sequence, TokenSink] = {}
        self._commands: queue.SimpleQueue[tuple[str, Sequence] | object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._priority: CorePriority = priority
        # What the step thread runs at ("SCHED_FIFO priority 1", ...) and its OS thread id,
        # once it has started.
        self.scheduling: str | None = None
        self.step_thread_id: int | None = None
        self.dead: EngineDead | None = None  # set, on the event loop, once the core has died

    # -- event-loop side -------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._thread is not None:
            raise RuntimeError("the engine loop is already running")
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="engine-core", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._commands.put(_STOP)
        await asyncio.to_thread(thread.join)
        self._thread = None

    def submit(self, seq: Sequence, sink: TokenSink) -> None:
        if self.dead is not None:
            raise self.dead
        self._sinks[seq] = sink
        self._commands.put(("add", seq))

    def abort(self, seq: Sequence) -> None:
        """Forget a sequence that has not finished (client gone, stream dropped)."""
        if self._sinks.pop(seq, None) is not None and not seq.finished:
            self._commands.put(("abort", seq))

    @property
    def stats(self) -> SchedulerStats:
        return self.scheduler.stats

    def records(self) -> list[StepRecord]:
        with self._records_lock:
            return list(self._records)

    def _deliver(self, events: list[TokenEvent]) -> None:
        for event in events:
            sink = self._sinks.get(event.sequence)
            if event.finished:
                self._sinks.pop(event.sequence, None)
            if sink is not None:
                sink.on_token(event)

    def _fail_all(self, error: EngineDead) -> None:
        self.dead = error
        sinks, self._sinks = list(self._sinks.values()), {}
        for sink in sinks:
            sink.on_engine_dead(error)

    # -- engine-core thread ----------------------------------------------------------
    def _started(self, scheduling: str, thread_id: int) -> None:
        self.scheduling, self.step_thread_id = scheduling, thread_id
        _log.info("engine core step thread %d: %s", thread_id, scheduling)

    def _run(self) -> None:
        try:
            self._steps()
        except Exception as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """The step loop raised: every open stream ends with an error, and so do new ones."""
        _log.exception("engine core failed; the engine serves no more requests")
        if self._loop is not None:
            error = EngineDead(f"engine core failed: {exc!r}")
            self._loop.call_soon_threadsafe(self._fail_all, error)

    def _steps(self) -> None:
        self._started(request_core_priority(self._priority), threading.get_native_id())
        started_at = time.monotonic()
        # Back to back, a step starts where the previous one ended: the bookkeeping between
        # them (tokens out, commands in, the next batch) overlaps the step, as vLLM's async
        # scheduling overlaps CPU work with the GPU, and shows up as lateness if it runs over.
        previous_end: float | None = None
        while True:
            if not self._drain(block=False, timeout=None, step_end=previous_end):
                return
            now = time.monotonic() if previous_end is None else previous_end
            events = self.scheduler.release_held(now)
            step = self.scheduler.schedule(now)
            if step is None:
                self._post(events)
                if previous_end is not None:
                    # A request may have arrived after the last step ended: look again at
                    # the real time before sleeping, or it would wait for the next command.
                    previous_end = None
                    continue
                self._idle()
                now = time.monotonic()
                timer = self.scheduler.next_timer(now)
                timeout = None if timer is None else max(0.0, timer - now)
                if not self._drain(block=True, timeout=timeout, step_end=None):
                    return
                continue
            stall = self._stall_seconds(now - started_at, step.seconds)
            modelled = step.seconds + stall
            _sleep_until(now + modelled)
            end = previous_end = time.monotonic()
            events += self.scheduler.complete(step, end)
            record = StepRecord(
                start=now,
                modelled_seconds=modelled,
                actual_seconds=end - now,
                stall_seconds=stall,
                num_seqs=len(step.entries),
                num_tokens=step.num_tokens,
            )
            with self._records_lock:
                self._records.append(record)
            for observer in self._observers:
                observer.on_step(record, self.scheduler.stats)
            self._post(events)

    def _idle(self) -> None:
        for observer in self._observers:
            observer.on_idle(self.scheduler.stats)

    def _drain(self, *, block: bool, timeout: float | None, step_end: float | None) -> bool:
        """Apply pending commands (waiting for one if `block`); False once told to stop.

        `step_end` is when the last step ended, if the next one follows it back to back.
        """
        try:
            command = self._commands.get(block=block, timeout=timeout)
        except queue.Empty:
            return True
        while True:
            if command is _STOP:
                return False
            if isinstance(command, tuple):
                kind, seq = command
                if kind == "add":
                    self._enqueue(seq, step_end)
                elif not seq.finished:
                    self.scheduler.abort(seq)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _enqueue(self, seq: Sequence, step_end: float | None) -> None:
        """Put a request the frontend handed over into the scheduler's queue: vLLM's QUEUED
        event, where its time in queue starts.

        Like vLLM's busy loop, the core takes requests in between steps, so one handed over
        during a step waits for the step to end; vLLM counts that wait before the queue,
        with the API server's work, since its QUEUED event comes when the scheduler adds the
        request. Back to back, the next step starts where the last one ended, and so does
        the time in queue of what came in meanwhile.
        """
        taken = time.monotonic() if step_end is None else step_end
        # Never before the arrival: a request may come in while the last step's tokens go out.
        self.scheduler.add(seq, max(taken, seq.arrival))

    def _post(self, events: list[TokenEvent]) -> None:
        if events and self._loop is not None:
            self._loop.call_soon_threadsafe(self._deliver, events)
