"""The roofline step model and the presets' numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spanbudget.service.engine.perf_model import BatchEntry, PerfModel, soft_max
from spanbudget.service.engine.presets import DEFAULT_PRESET, PRESETS, PresetError, get_preset

QWEN3_8B_LAYER_PARAMS = 36 * (4096 * (32 + 16) * 128 + 32 * 128 * 4096 + 3 * 4096 * 12288)
QWEN3_8B_VOCAB = 151936 * 4096


def test_prefill_counts_layer_weights_per_token_and_the_lm_head_once() -> None:
    p = PRESETS["qwen3-8b-h100"]
    assert p.params_b * 1e9 == QWEN3_8B_LAYER_PARAMS + 2 * QWEN3_8B_VOCAB  # 8.19 B
    cost = PerfModel(p).step([BatchEntry(new_tokens=2000, context_tokens=0)])
    flops = (
        2 * QWEN3_8B_LAYER_PARAMS * 2000
        + 2 * QWEN3_8B_VOCAB
        + 4 * 36 * 32 * 128 * 2000 * (2001 / 2)
    )
    assert cost.flops == pytest.approx(flops)
    assert cost.compute_bound
    fixed = 36 * p.layer_overhead_us / 1e6 + p.step_overhead_ms / 1e3
    peak = 989e12 * p.mfu
    weights = (QWEN3_8B_LAYER_PARAMS + QWEN3_8B_VOCAB) * 2 / (3350e9 * p.mbu)
    kv = 2000 * 2 * 36 * 8 * 128 * 2 / (3350e9 * p.attn_mbu)
    attention = max(4 * 36 * 32 * 128 * 2000 * (2001 / 2) / peak, kv)
    matmuls = soft_max((flops - 4 * 36 * 32 * 128 * 2000 * (2001 / 2)) / peak, weights)
    assert cost.seconds == pytest.approx(fixed + matmuls + attention)


def test_decode_is_memory_bound_reading_weights_and_kv_cache() -> None:
    p = PRESETS["qwen3-8b-h100"]
    cost = PerfModel(p).step([BatchEntry(new_tokens=1, context_tokens=999)])
    kv_bytes = 1000 * 2 * 36 * 8 * 128 * 2
    weights = (QWEN3_8B_LAYER_PARAMS + QWEN3_8B_VOCAB) * 2
    assert not cost.compute_bound
    assert cost.bytes == pytest.approx(weights + kv_bytes)
    assert cost.memory_seconds == pytest.approx(
        weights / (3350e9 * p.mbu) + kv_bytes / (3350e9 * p.attn_mbu)
    )


def test_the_knee_is_a_max_away_from_the_crossing() -> None:
    assert soft_max(10.0, 0.1) == pytest.approx(10.0, rel=1e-5)
    assert soft_max(1.0, 1.0) == pytest.approx(2 ** (1 / 3))


def test_a_preset_without_vocabulary_is_the_plain_roofline() -> None:
    p = PRESETS["qwen3-8b-h100"].with_overrides(
        {"vocab_size": 0, "layer_overhead_us": 0.0, "attn_mbu": 0.0, "step_overhead_ms": 0.0}
    )
    cost = PerfModel(p).step([BatchEntry(new_tokens=1, context_tokens=999)])
    assert cost.bytes == pytest.approx(p.params_b * 1e9 * 2 + 1000 * p.kv_bytes_per_token)
    assert cost.memory_seconds == pytest.approx(cost.bytes / (3350e9 * p.mbu))


@pytest.mark.parametrize("name", ["qwen3-8b", "qwen3-32b"])
def test_h200_presets_hold_to_the_measured_kernel_times(shared_fixtures: Path, name: str) -> None:
    """The shipped H200 presets against the fixture: prefill within 5 % MAPE (32-8,192
    tokens), decode at batch <= 64 within 15 %."""
    table = json.loads((shared_fixtures / "gpu" / "h200-qwen3-prefill-decode.json").read_text())
    preset = get_preset(f"{name}-h200").with_overrides({"step_overhead_ms": 0.0})
    perf = PerfModel(preset)
    measured = table["models"][name]
    prefill = [
        abs(perf.prefill_seconds(row["tokens"]) * 1e3 / row["kernel_ms"] - 1)
        for row in measured["prefill"]
    ]
    decode = [
        abs(perf.step_seconds([BatchEntry(1, row["context"])] * row["batch"]) * 1e3
            / row["kernel_ms"] - 1)
        for row in measured["decode"]
        if row["batch"] <= 64
    ]  # fmt: skip
    assert len(prefill) == 9
    assert sum(prefill) / len(prefill) < 0.05
    assert sum(decode) / len(decode) < 0.15


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
    free = (80 * 0.9 - 2.0) * 1e9 - p.params_b * 1e9 * 2
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
