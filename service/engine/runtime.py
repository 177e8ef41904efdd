"""The assembled emulator: preset, scheduler loop, tokenizer, metrics and tracing, per request.

`EngineRuntime.submit` turns one prepared request into a `RequestStream` of token events;
the HTTP layer (api.py) only parses, formats and streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry

from ..errors import ServiceError
from .core_priority import CorePriority
from .core_process import ProcessEngineLoop
from .engine_loop import (
    EngineDead,
    EngineLoop,
    StallSource,
    no_stall,
)
from .faults import RequestFaults, TroubleMaker
from .generation import OutputPlan, OutputPlanner
from .metrics import EngineMetrics
from .perf_model import PerfModel
from .presets import Preset
from .scheduler import RequestTimings, Scheduler, Sequence, TokenEvent
from .tracing import RequestSpanInfo, RequestTracer, phase_spans

__all__ = ["ArrivalTime", "EngineRuntime", "PreparedRequest", "PromptTooLong", "RequestStream"]


class PromptTooLong(ServiceError, ValueError):
    """The prompt plus its output cannot fit the model's context or the KV cache."""


@dataclass(frozen=True, slots=True)
class ArrivalTime:
    """vLLM's `arrival_time`: when the API server took the request, before it did any work
    on it. vLLM's renderer stamps it first thing (`BaseRenderer.render_chat_async` and
    `render_cmpl_async`), before the chat template and the tokenizer run; the `llm_request`
    span starts there, and its time to first token and e2e count from there.
    """

    wall_ns: int  # for the span's start
    monotonic: float  # for durations, on the clock the engine core stamps its events with

    @classmethod
    def now(cls) -> ArrivalTime:
        return cls(time.time_ns(), time.monotonic())


@dataclass(frozen=True)
class PreparedRequest:
    request_id: str
    prompt_tokens: int
    plan: OutputPlan
    span: RequestSpanInfo
    arrival: ArrivalTime
    queue_delay: float = 0.0
    prefill_delay: float = 0.0
    kv_transfer_delay: float = 0.0
    faults: RequestFaults = dataclasses.field(default_factory=RequestFaults)


class RequestStream:
    """One request's tokens as they leave the engine; records its metrics and span on finish."""

    def __init__(
        self, runtime: EngineRuntime, request: PreparedRequest, seq: Sequence, span: RequestSpanInfo
    ) -> None:
        self.request = request
        self.span = span
        self.sequence = seq
        self._runtime = runtime
        self._queue: asyncio.Queue[TokenEvent | EngineDead] = asyncio.Queue()
        self._last_token_time = 0.0
        self._first_token_seen: float | None = None
        self.timings: RequestTimings | None = None

    def on_token(self, event: TokenEvent) -> None:
        # The API server has the token now: vLLM's output handler takes its IterationStats
        # timestamp here, and measures time to first token and e2e up to it.
        seen = time.monotonic()
        metrics = self._runtime.metrics
        if event.index == 0:
            self._first_token_seen = seen
            metrics.on_first_token(seen - self.sequence.arrival)
        else:
            metrics.on_next_token(event.time - self._last_token_time)
        self._last_token_time = event.time
        if event.finished:
            disaggregated = self._runtime.preset.disaggregated
            self.timings = RequestTimings.of(
                self.sequence,
                first_token_seen=self._first_token_seen,
                finished_seen=seen,
                disaggregated=disaggregated,
            )
            phases = None
            if disaggregated:
                phases = phase_spans(self.sequence)
            self._runtime.tracer.emit(self.span, self.timings, phases)
            metrics.on_finished(self.timings, self.request.plan.finish_reason)
        self._queue.put_nowait(event)

    def on_engine_dead(self, error: EngineDead) -> None:
        self._queue.put_nowait(error)

    async def batches(self) -> AsyncIterator[list[TokenEvent]]:
        """Token events in arrival order, grouped by what is ready at each wake-up.

        Grouping lets a slow reader catch up in one write; every event stays one token.
        Raises `EngineDead` where the engine core died before the sequence finished.
        """
        while True:
            batch: list[TokenEvent] = []
            item = await self._queue.get()
            while True:
                if isinstance(item, EngineDead):
                    if batch:
                        yield batch
                    raise item
                batch.append(item)
                if self._queue.empty():
                    break
                item = self._queue.get_nowait()
            yield batch
            if batch[-1].finished:
                return

    def abort(self) -> None:
        """Stop generating (client gone, dropped stream); a no-op once finished."""
        self._runtime.loop.abort(self.sequence)


class EngineRuntime:
    """Everything one emulated engine needs, built from injected collaborators."""

    def __init__(
        self,
        preset: Preset,
        planner: OutputPlanner,
        *,
        model_name: str,
        tracer: RequestTracer,
        registry: CollectorRegistry,
        stall_seconds: StallSource | None = None,
        trouble: TroubleMaker | None = None,
        faults_enabled: bool = False,
        core: Literal["thread", "process"] = "thread",
        core_priority: CorePriority = "realtime",
    ) -> None:
        """`core="process"` runs the scheduler in its own process, as vLLM does, so that no
        frontend work can delay a step; `scheduler` is then only used for admission checks.
        `core_priority` is the step thread's CPU priority (see core_priority.py).
        """
        self.preset = preset
        self.perf = PerfModel(preset)
        self.scheduler = Scheduler(self.perf)
        self.planner = planner
        self.model_name = model_name
        self.tracer = tracer
        self.metrics = EngineMetrics(registry, model_name)
        self.registry = registry
        self.trouble = trouble or TroubleMaker()
        self.faults_enabled = faults_enabled
        self.created = int(time.time())
        self.core = core
        self.loop: EngineLoop | ProcessEngineLoop
        if core == "process":
            self.loop = ProcessEngineLoop(
                preset,
                stall_seconds=stall_seconds or no_stall,
                observers=(self.metrics,),
                priority=core_priority,
            )
        else:
            self.loop = EngineLoop(
                self.scheduler,
                stall_seconds=stall_seconds or no_stall,
                observers=(self.metrics,),
                priority=core_priority,
            )
        self._running = False

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[EngineRuntime]:
        """Run the engine-core thread for the duration of the block (app lifespan, tests)."""
        if self._running:
            yield self
            return
        self._running = True
        self.loop.start(asyncio.get_running_loop())
        try:
            yield self
        finally:
            await self.loop.stop()
            self._running = False

    @property
    def running_now(self) -> bool:
        return self._running

    def check_fits(self, prompt_tokens: int, output_tokens: int) -> None:
        max_len = self.preset.max_model_len
        if prompt_tokens + output_tokens > max_len:
            raise PromptTooLong(
                f"This model's maximum context length is {max_len} tokens. However, you "
                f"requested {prompt_tokens + output_tokens} tokens ({prompt_tokens} in the "
                f"messages, {output_tokens} in the completion). Please reduce the length of "
                "the messages or completion."
            )
        if not self.scheduler.fits(prompt_tokens + output_tokens):
            raise PromptTooLong(
                f"The request needs {prompt_tokens + output_tokens} tokens of KV cache; the "
                f"engine has {self.scheduler.total_blocks * self.preset.block_size}."
            )

    def submit(self, request: PreparedRequest) -> RequestStream:
        """Hand a request to the engine core, which queues it in between steps."""
        span = dataclasses.replace(request.span, arrival_time_ns=request.arrival.wall_ns)
        seq = Sequence(
            request_id=request.request_id,
            prompt_tokens=request.prompt_tokens,
            output_tokens=request.plan.num_tokens,
            arrival=request.arrival.monotonic,
            queue_delay=request.queue_delay,
            prefill_delay=request.prefill_delay,
            kv_transfer_delay=request.kv_transfer_delay,
        )
        stream = RequestStream(self, request, seq, span)
        self.loop.submit(seq, stream)
        return stream
