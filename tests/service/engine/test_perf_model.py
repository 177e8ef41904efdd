"""The roofline step model and the presets' numbers."""

from __future__ import annotations

import pytest

from spanbudget.service.engine.perf_model import BatchEntry, PerfModel
from spanbudget.service.engine.presets import DEFAULT_PRESET, PRESETS, PresetError, get_preset


def test_prefill_is_compute_bound_and_matches_the_roofline_formula() -> None:
    p = PRESETS["qwen3-8b-h100"]
    cost = PerfModel(p).step([BatchEntry(new_tokens=2000, context_tokens=0)])
    flops = 2 * 8.2e9 * 2000 + 4 * 36 * 32 * 128 * 2000 * (2001 / 2)
    assert cost.flops == pytest.approx(flops)
    assert cost.compute_bound
    assert cost.seconds == pytest.approx(flops / (989e12 * 0.5) + 1e-3)


def test_decode_is_memory_bound_reading_weights_and_kv_cache() -> None:
    p = PRESETS["qwen3-8b-h100"]
    cost = PerfModel(p).step([BatchEntry(new_tokens=1, context_tokens=999)])
    kv_per_token = 2 * 36 * 8 * 128 * 2
    moved = 8.2e9 * 2 + 1000 * kv_per_token
    assert not cost.compute_bound
    assert cost.bytes == pytest.approx(moved)
    assert cost.seconds == pytest.approx(moved / (3350e9 * 0.75) + 1e-3)


def test_step_time_grows_with_batch_and_context() -> None:
    perf = PerfModel(PRESETS["qwen3-8b-h100"])
    one = perf.step_seconds([BatchEntry(1, 1000)])
    many = perf.step_seconds([BatchEntry(1, 1000)] * 64)
    longer = perf.step_seconds([BatchEntry(1, 8000)] * 64)
    assert one < many < longer


def test_tensor_parallel_adds_up_gpus() -> None:
    single = get_preset("qwen2.5-72b-fp8-4xh100").with_overrides({"num_gpus": 1, "hbm_gb": 320})
    four = get_preset("qwen2.5-72b-fp8-4xh100")
    batch = [BatchEntry(4000, 0)]
    t1 = PerfModel(single).step(batch).compute_seconds
    t4 = PerfModel(four).step(batch).compute_seconds
    assert t1 == pytest.approx(4 * t4)


def test_presets_have_room_for_a_kv_cache_and_realistic_prefill() -> None:
    for preset in PRESETS.values():
        assert preset.kv_capacity_blocks * preset.block_size > preset.max_model_len
    # A ~500-token RAG prompt on the default deployment fits the 100 ms prefill target.
    assert PerfModel(PRESETS[DEFAULT_PRESET]).prefill_seconds(500) < 0.1


def test_kv_capacity_follows_memory_left_after_weights() -> None:
    p = PRESETS["qwen3-8b-h100"]
    free = (80 * 0.9 - 2.0) * 1e9 - 8.2e9 * 2
    assert p.kv_capacity_blocks == int(free // (2 * 36 * 8 * 128 * 2 * 16))
    assert p.with_overrides({"num_gpu_blocks": 40}).kv_capacity_blocks == 40


def test_overrides_are_checked() -> None:
    with pytest.raises(PresetError, match="unknown preset parameter"):
        PRESETS[DEFAULT_PRESET].with_overrides({"flux_capacitor": 1})
    with pytest.raises(PresetError, match="mfu"):
        PRESETS[DEFAULT_PRESET].with_overrides({"mfu": 1.5})
    with pytest.raises(PresetError, match="no memory"):
        PRESETS[DEFAULT_PRESET].with_overrides({"hbm_gb": 16})
    with pytest.raises(PresetError, match="unknown preset"):
        get_preset("nope")
