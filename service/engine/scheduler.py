"""Continuous-batching scheduler in the manner of vLLM V1, as pure logic over a given time.

FCFS, chunked prefill within `max_num_batched_tokens` and `max_num_seqs`, a KV cache of
fixed-size blocks, preemption by recompute when it fills. The caller owns the clock: it
asks `schedule(now)` for a step, waits the step's modelled duration, then calls
`complete(step, end)` and delivers the returned token events.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from .perf_model import BatchEntry, PerfModel

__all__ = ["RequestTimings", "Scheduler", "SchedulerStats", "Sequence", "Step", "TokenEvent"]


@dataclass(eq=False)
class Sequence:
    """One request inside the engine, with the engine-core timestamps vLLM records.

    `arrival` is vLLM's `arrival_time`: when the API server took the request, before its
    own work on it (chat template, tokenizer) and the hand-over to the core; `queued_ts` is
    when the core's scheduler took it (vLLM's QUEUED event). `output_tokens` is how many
    tokens the request will generate in all; `queue_delay` and `prefill_delay` (seconds) are
    injected faults: extra time held in the queue, and extra time between the end of prefill
    and the first token; `kv_transfer_delay` slows the KV cache's move to the decode
    instance when the engine runs disaggregated. `prefilled_ts` is when its prefill ended.
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    arrival: float
    queue_delay: float = 0.0
    prefill_delay: float = 0.0
    kv_transfer_delay: float = 0.0
    num_computed: int = 0
    num_output: int = 0
    num_blocks: int = 0
    num_preemptions: int = 0
    queued_ts: float | None = None
    scheduled_ts: float | None = None
    prefilled_ts: float | None = None
    # Disaggregated: when the prefill instance sent the KV cache (after any injected prefill
    # delay) and when it arrived at the decode instance, which then takes the sequence into
    # its next step.
    kv_sent_ts: float | None = None
    kv_arrived_ts: float | None = None
    first_token_ts: float | None = None
    last_token_ts: float | None = None
    finished_ts: float | None = None
    hold_until: float | None = None
    aborted: bool = False

    @property
    def eligible_at(self) -> float:
        queued = self.arrival if self.queued_ts is None else self.queued_ts
        return queued + self.queue_delay

    @property
    def finished(self) -> bool:
        return self.finished_ts is not None

    @property
    def tokens_to_compute(self) -> int:
        # After prefill every sampled token is fed back once; after preemption the prompt
        # and everything generated so far is recomputed.
        return self.prompt_tokens + self.num_output - self.num_computed


@dataclass(frozen=True, slots=True)
class RequestTimings:
    """A finished request's phases in seconds, as vLLM's `llm_request` span reports them.

    As in vLLM (vllm/v1/metrics/stats.py), the API server's two measures, time to first
    token and e2e, count from the arrival; the core's phases count from its own timestamps.
    The time from the arrival to the queue is the API server's work and the wait for the
    core to take the request: in no phase of its own, it is TTFT less queue and prefill.
    """

    prompt_tokens: int
    completion_tokens: int
    time_in_queue: float  # first scheduled - queued
    time_to_first_token: float  # first token handled by the API server - arrival
    time_in_model_prefill: float  # first token - first scheduled
    time_in_model_decode: float  # last token - first token
    time_in_model_inference: float  # last token - first scheduled
    e2e: float  # last output handled by the API server - arrival

    @classmethod
    def of(
        cls,
        seq: Sequence,
        *,
        first_token_seen: float | None = None,
        finished_seen: float | None = None,
        disaggregated: bool = False,
    ) -> RequestTimings:
        """`first_token_seen` and `finished_seen` are when the API server handled the first
        and the last output, where vLLM's output handler takes its IterationStats timestamp;
        without them (the offline simulation) the core's own times stand in.

        `disaggregated`: the prefill is the prefill instance's (first scheduled to prefill
        done); the KV cache's transfer after it is in the time to first token, and in
        the `vllm_async_kv_transfer` span, but in no phase attribute."""
        if (
            seq.queued_ts is None
            or seq.scheduled_ts is None
            or seq.first_token_ts is None
            or seq.last_token_ts is None
        ):
            raise ValueError(f"sequence {seq.request_id} has not produced a token")
        first_token = seq.first_token_ts if first_token_seen is None else first_token_seen
        prefill_end = seq.first_token_ts
        if disaggregated and seq.prefilled_ts is not None:
            prefill_end = seq.prefilled_ts
        end = seq.finished_ts if seq.finished_ts is not None else seq.last_token_ts
        end = end if finished_seen is None else finished_seen
        return cls(
            prompt_tokens=seq.prompt_tokens,
            completion_tokens=seq.num_output,
            time_in_queue=seq.scheduled_ts - seq.queued_ts,
            time_to_first_token=first_token - seq.arrival,
            time_in_model_prefill=prefill_end - seq.scheduled_ts,
            time_in_model_decode=seq.last_token_ts - seq.first_token_ts,
            time_in_model_inference=seq.last_token_ts - seq.scheduled_ts,
            e2e=end - seq.arrival,
        )


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A token reached the output: `index` counts from 0; `finished` marks the last one."""

    sequence: Sequence
    index: int
    time: float
    finished: bool


@dataclass(frozen=True)
class Step:
    """One scheduled engine step: which sequences compute how many tokens, and for how long."""

    start: float
    entries: tuple[tuple[Sequence, int], ...]
    seconds: float
    preempted: tuple[Sequence, ...] = ()

    @property
    def num_tokens(self) -> int:
        return sum(n for _, n in self.entries)


@dataclass
class SchedulerStats:
    num_running: int = 0
    num_waiting: int = 0
    kv_cache_usage: float = 0.0  # 0..1, as vllm:kv_cache_usage_perc reports it
    num_preemptions: int = 0
    # The latest preempted request ids, for tests and debugging; bounded, as a server runs
    # for weeks.
    recent_preemptions: deque[str] = field(default_factory=lambda: deque(maxlen=1024))


class Scheduler:
    """Decides each step's batch and advances sequences when the step completes.

    Disaggregated (`preset.disaggregated`): a prefill instance and a decode instance, each
    on its own GPU of the preset's kind, step side by side. A step's prefill work runs on
    one and its decode work on the other, and the step lasts as long as the slower of the
    two. A finished prefill hands its KV cache to the decode instance over the link
    (`kv_transfer_seconds`); the first token goes out when the cache has arrived. The
    two instances' KV caches are counted as one pool.
    """

    def __init__(self, perf: PerfModel) -> None:
        preset = perf.preset
        self.perf = perf
        self.disaggregated = preset.disaggregated
        self._link_latency = preset.kv_link_latency_ms / 1e3
        self._link_seconds_per_token = preset.kv_bytes_per_token / (preset.kv_link_gbs * 1e9)
        self.block_size = preset.block_size
        self.total_blocks = preset.kv_capacity_blocks
        self.max_num_batched_tokens = preset.max_num_batched_tokens
        self.max_num_seqs = preset.max_num_seqs
        self.free_blocks = self.total_blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.held: list[Sequence] = []  # prefilled, first token held back by a fault
        self.stats = SchedulerStats()

    # -- admission -------------------------------------------------------------------
    def fits(self, total_tokens: int) -> bool:
        """Whether a sequence of this many tokens can ever fit in the KV cache."""
        return self._blocks_for(total_tokens) <= self.total_blocks

    def add(self, seq: Sequence, now: float) -> None:
        """Queue a sequence the core has taken at `now`; its time in queue starts there."""
        seq.queued_ts = now
        self.waiting.append(seq)
        self._update_stats()

    def abort(self, seq: Sequence) -> None:
        """Drop a sequence wherever it is (client gone, dropped stream) and free its blocks."""
        seq.aborted = True
        for queue in (self.running, self.held):
            if seq in queue:
                queue.remove(seq)
        if seq in self.waiting:
            self.waiting.remove(seq)
        self._free(seq)
        self._update_stats()

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.held)

    def next_timer(self, now: float) -> float | None:
        """The earliest time after `now` at which something becomes runnable by itself."""
        times = [s.hold_until for s in self.held if s.hold_until is not None]
        times += [s.eligible_at for s in self.waiting if s.eligible_at > now]
        return min(times) if times else None

    # -- stepping --------------------------------------------------------------------
    def release_held(self, now: float) -> list[TokenEvent]:
        """First tokens whose injected prefill delay has passed."""
        events = []
        for seq in [s for s in self.held if s.hold_until is not None and s.hold_until <= now]:
            self.held.remove(seq)
            seq.hold_until = None
            events.append(self._emit(seq, now))
            if not seq.finished:
                self.running.append(seq)
        if events:
            self._update_stats()
        return events

    def schedule(self, now: float) -> Step | None:
        """The next step's batch, or None when nothing can run at `now`."""
        budget = self.max_num_batched_tokens
        entries: list[tuple[Sequence, int]] = []
        preempted: list[Sequence] = []
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.tokens_to_compute, budget)
            preempted_self = False
            while not preempted_self and not self._allocate(seq, n):
                # FCFS: the latest-arrived running sequence gives its blocks back. It sits
                # at or after index i, so it has not been put in this step's batch.
                victim = self.running.pop()
                self._preempt(victim)
                preempted.append(victim)
                preempted_self = victim is seq
            if preempted_self:
                break
            entries.append((seq, n))
            budget -= n
            i += 1
        if not preempted:
            for seq in list(self.waiting):
                # Held sequences (first token held back by an injected prefill delay) are
                # still in the batch as far as vLLM's max_num_seqs is concerned.
                if budget <= 0 or len(self.running) + len(self.held) >= self.max_num_seqs:
                    break
                if seq.eligible_at > now:
                    continue
                n = min(seq.tokens_to_compute, budget)
                if not self._allocate(seq, n):
                    break  # FCFS: later arrivals do not overtake one that does not fit
                self.waiting.remove(seq)
                self.running.append(seq)
                if seq.scheduled_ts is None:
                    seq.scheduled_ts = now
                entries.append((seq, n))
                budget -= n
        self._update_stats()
        if not entries:
            return None
        if self.disaggregated:  # two GPUs side by side: prefill work, and the rest
            prefill = [BatchEntry(n, s.num_computed) for s, n in entries if s.num_output == 0]
            decode = [BatchEntry(n, s.num_computed) for s, n in entries if s.num_output > 0]
            cost = max(self.perf.step_seconds(prefill), self.perf.step_seconds(decode))
        else:
            cost = self.perf.step_seconds(BatchEntry(n, s.num_computed) for s, n in entries)
        return Step(now, tuple(entries), cost, tuple(preempted))

    def kv_transfer_seconds(self, prompt_tokens: int) -> float:
        """Moving a prompt's KV cache between instances: the link's latency, then its bytes
        (every layer's keys and values) at the link's bandwidth."""
        return self._link_latency + prompt_tokens * self._link_seconds_per_token

    def complete(self, step: Step, end: float) -> list[TokenEvent]:
        """Advance the step's sequences; one whose known tokens are all computed samples a token."""
        events: list[TokenEvent] = []
        for seq, n in step.entries:
            if seq.aborted:
                continue
            seq.num_computed += n
            if seq.tokens_to_compute > 0:
                continue  # a prefill chunk, more to come
            seq.num_output += 1
            if seq.num_output == 1 and seq.first_token_ts is None:
                seq.prefilled_ts = end
                hold = seq.prefill_delay
                if self.disaggregated:
                    seq.kv_sent_ts = end + seq.prefill_delay
                    moved = self.kv_transfer_seconds(seq.prompt_tokens) + seq.kv_transfer_delay
                    seq.kv_arrived_ts = seq.kv_sent_ts + moved
                    hold += moved
                if hold > 0:
                    seq.hold_until = end + hold
                    self.running.remove(seq)
                    self.held.append(seq)
                    continue
            events.append(self._emit(seq, end))
        self._update_stats()
        return events

    # -- internals -------------------------------------------------------------------
    def _emit(self, seq: Sequence, now: float) -> TokenEvent:
        if seq.first_token_ts is None:
            seq.first_token_ts = now
        seq.last_token_ts = now
        done = seq.num_output >= seq.output_tokens
        if done:
            seq.finished_ts = now
            if seq in self.running:
                self.running.remove(seq)
            self._free(seq)
        return TokenEvent(seq, seq.num_output - 1, now, done)

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.block_size)

    def _allocate(self, seq: Sequence, new_tokens: int) -> bool:
        needed = self._blocks_for(seq.num_computed + new_tokens) - seq.num_blocks
        if needed > self.free_blocks:
            return False
        if needed > 0:
            self.free_blocks -= needed
            seq.num_blocks += needed
        return True

    def _free(self, seq: Sequence) -> None:
        self.free_blocks += seq.num_blocks
        seq.num_blocks = 0

    def _preempt(self, seq: Sequence) -> None:
        self._free(seq)
        seq.num_computed = 0
        seq.num_preemptions += 1
        self.stats.num_preemptions += 1
        self.stats.recent_preemptions.append(seq.request_id)
        self.waiting.appendleft(seq)

    def _update_stats(self) -> None:
        self.stats.num_running = len(self.running) + len(self.held)
        self.stats.num_waiting = len(self.waiting)
        used = self.total_blocks - self.free_blocks
        self.stats.kv_cache_usage = used / self.total_blocks if self.total_blocks else 0.0
