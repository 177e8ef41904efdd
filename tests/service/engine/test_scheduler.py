"""The continuous-batching scheduler on virtual time (no clock, no event loop)."""

from __future__ import annotations

import pytest
from spanbudget.service.engine.perf_model import BatchEntry, PerfModel
from spanbudget.service.engine.presets import PRESETS
from spanbudget.service.engine.scheduler import RequestTimings, Scheduler, Sequence
from spanbudget.service.engine.simulation import Arrival, simulate

H100 = PRESETS["qwen3-8b-h100"]


def test_chunked_prefill_serves_prompts_in_arrival_order_within_the_token_budget() -> None:
    preset = H100.with_overrides({"max_num_batched_tokens": 2048})
    result = simulate(preset, [Arrival(0.0, 2000, 4)] * 8)
    assert all(step.num_tokens <= 2048 for step in result.steps)
    first_tokens = [seq.first_token_ts for seq in result.sequences]
    assert first_tokens == sorted(first_tokens)
    # The last prompt's first token comes after every chunk scheduled before it.
    last = result.sequences[-1]
    assert last.first_token_ts == pytest.approx(
        sum(s.seconds for s in result.steps if s.start < last.first_token_ts)
    )
    # 16,000 prompt tokens need at least 8 full steps.
    assert last.first_token_ts > 7 * PerfModel(preset).step_seconds([BatchEntry(2048, 0)])


def test_max_num_seqs_bounds_the_batch() -> None:
    preset = H100.with_overrides({"max_num_seqs": 3})
    result = simulate(preset, [Arrival(0.0, 50, 10)] * 7)
    assert max(len(step.entries) for step in result.steps) == 3
    assert all(seq.num_output == 10 for seq in result.sequences)


def test_sequences_held_by_a_prefill_delay_count_against_max_num_seqs() -> None:
    scheduler = Scheduler(PerfModel(H100.with_overrides({"max_num_seqs": 2})))
    slow = Sequence("slow", prompt_tokens=50, output_tokens=5, arrival=0.0, prefill_delay=1.0)
    other = Sequence("other", prompt_tokens=50, output_tokens=5, arrival=0.0)
    late = Sequence("late", prompt_tokens=50, output_tokens=5, arrival=0.0)
    for seq in (slow, other, late):
        scheduler.add(seq, 0.0)
    step = scheduler.schedule(0.0)
    assert step is not None
    assert [s.request_id for s, _ in step.entries] == ["slow", "other"]
    scheduler.complete(step, now := step.seconds)
    assert scheduler.held == [slow]
    # "slow" waits out its delay, still holding its place in the batch: "late" waits too.
    step = scheduler.schedule(now)
    assert step is not None
    assert [s.request_id for s, _ in step.entries] == ["other"]


def test_full_kv_cache_preempts_the_latest_and_everyone_still_finishes() -> None:
    # 40 blocks of 16 tokens hold two of these sequences (100 prompt + 150 output) at once.
    preset = H100.with_overrides({"num_gpu_blocks": 40})
    result = simulate(preset, [Arrival(0.0, 100, 150)] * 4)
    assert result.num_preemptions > 0
    assert all(seq.num_output == 150 and seq.finished for seq in result.sequences)
    preempted = [seq for seq in result.sequences if seq.num_preemptions]
    assert preempted
    assert all(seq is not result.sequences[0] for seq in preempted)


def test_preemption_recomputes_prompt_and_generated_tokens() -> None:
    scheduler = Scheduler(PerfModel(H100.with_overrides({"num_gpu_blocks": 2})))
    a = Sequence("a", prompt_tokens=16, output_tokens=20, arrival=0.0)
    b = Sequence("b", prompt_tokens=15, output_tokens=20, arrival=0.0)
    scheduler.add(a, 0.0)
    scheduler.add(b, 0.0)
    now = 0.0
    step = scheduler.schedule(now)
    assert step is not None
    assert [n for _, n in step.entries] == [16, 15]
    scheduler.complete(step, now := now + step.seconds)
    # a now needs a second block for its 17th token; the cache is full, so b goes back.
    step = scheduler.schedule(now)
    assert step is not None
    assert [s.request_id for s in step.preempted] == ["b"]
    assert b.num_computed == 0
    assert b.num_output == 1
    assert scheduler.waiting[0] is b
    assert b.tokens_to_compute == 16  # its prompt and the one token it had generated


def test_injected_delays_add_to_queue_and_prefill_time() -> None:
    plain = simulate(H100, [Arrival(0.0, 500, 3)]).timings()[0]
    delayed = simulate(H100, [Arrival(0.0, 500, 3, queue_delay=0.05, prefill_delay=0.04)])
    timings = delayed.timings()[0]
    assert timings.time_in_queue == pytest.approx(plain.time_in_queue + 0.05)
    assert timings.time_in_model_prefill == pytest.approx(plain.time_in_model_prefill + 0.04)
    assert timings.time_to_first_token == pytest.approx(plain.time_to_first_token + 0.09)


def test_a_request_that_comes_during_a_step_is_queued_when_the_step_ends() -> None:
    """vLLM's QUEUED event comes when the core's scheduler adds the request, in between
    steps: the wait for the step under way is no time in queue, but it is time to first
    token, which counts from the arrival."""
    result = simulate(H100, [Arrival(0.0, 2000, 4), Arrival(0.001, 100, 4)])
    first_step = result.steps[0]
    late = result.sequences[1]
    timings = RequestTimings.of(late)
    assert late.queued_ts == pytest.approx(first_step.seconds)
    assert timings.time_in_queue == 0.0  # it joins the very next step
    before_queue = (
        timings.time_to_first_token - timings.time_in_queue - timings.time_in_model_prefill
    )
    assert before_queue == pytest.approx(first_step.seconds - 0.001)


def test_decode_step_time_grows_with_the_batch() -> None:
    alone = simulate(H100, [Arrival(0.0, 1000, 20)])
    crowd = simulate(H100, [Arrival(0.0, 1000, 20)] * 64)
    itl_alone = alone.timings()[0].time_in_model_decode / 19
    itl_crowd = max(t.time_in_model_decode for t in crowd.timings()) / 19
    assert itl_crowd > 1.3 * itl_alone


def test_abort_frees_blocks_and_forgets_the_sequence() -> None:
    scheduler = Scheduler(PerfModel(H100))
    seq = Sequence("x", prompt_tokens=100, output_tokens=5, arrival=0.0)
    scheduler.add(seq, 0.0)
    step = scheduler.schedule(0.0)
    assert step is not None
    assert scheduler.free_blocks < scheduler.total_blocks
    scheduler.abort(seq)
    assert scheduler.complete(step, step.seconds) == []
    assert scheduler.free_blocks == scheduler.total_blocks
    assert not scheduler.has_work
