"""Offline runs of the scheduler on virtual time: what the engine predicts for a workload.

The same `Scheduler` the real-time loop drives, stepped on a virtual clock; tests and the
benchmark compare real runs with these predictions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .perf_model import PerfModel
from .presets import Preset
from .scheduler import RequestTimings, Scheduler, Sequence, Step

__all__ = ["Arrival", "SimulationResult", "simulate"]


@dataclass(frozen=True)
class Arrival:
    """A request reaching the engine at `time` (seconds from the start of the run)."""

    time: float
    prompt_tokens: int
    output_tokens: int
    queue_delay: float = 0.0
    prefill_delay: float = 0.0
    kv_transfer_delay: float = 0.0


@dataclass(frozen=True)
class SimulationResult:
    sequences: list[Sequence]  # in arrival order, all finished
    steps: list[Step]
    num_preemptions: int

    def timings(self) -> list[RequestTimings]:
        return [RequestTimings.of(seq) for seq in self.sequences]


def simulate(
    preset: Preset, arrivals: Iterable[Arrival], *, max_steps: int = 1_000_000
) -> SimulationResult:
    """Run every arrival to completion; step durations come straight from the model."""
    scheduler = Scheduler(PerfModel(preset))
    pending = sorted(arrivals, key=lambda a: a.time)
    sequences: list[Sequence] = []
    steps: list[Step] = []
    now = 0.0
    index = 0
    while index < len(pending) or scheduler.has_work:
        while index < len(pending) and pending[index].time <= now:
            a = pending[index]
            seq = Sequence(
                f"sim-{index}", a.prompt_tokens, a.output_tokens, a.time, a.queue_delay,
                a.prefill_delay, a.kv_transfer_delay,
            )  # fmt: skip
            scheduler.add(seq, now)  # as the real core does: in between steps
            sequences.append(seq)
            index += 1
        scheduler.release_held(now)
        step = scheduler.schedule(now)
        if step is None:
            timers = [scheduler.next_timer(now)]
            if index < len(pending):
                timers.append(pending[index].time)
            upcoming = [t for t in timers if t is not None]
            if not upcoming:
                raise RuntimeError("the scheduler is stuck: no step and nothing to wait for")
            now = min(upcoming)
            continue
        now += step.seconds
        scheduler.complete(step, now)
        steps.append(step)
        if len(steps) > max_steps:
            raise RuntimeError(f"no completion within {max_steps} steps")
    return SimulationResult(sequences, steps, scheduler.stats.num_preemptions)
