"""Roofline step-time model: how long one engine step of a given batch takes on a preset.

Pure arithmetic, no clock: the scheduler asks it for each step's duration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from spanbudget.service.engine.presets import Preset

__all__ = ["BatchEntry", "PerfModel", "StepCost"]


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One sequence's share of a step: tokens computed now, and tokens already in its KV cache."""

    new_tokens: int
    context_tokens: int


@dataclass(frozen=True, slots=True)
class StepCost:
    flops: float
    bytes: float
    compute_seconds: float
    memory_seconds: float
    seconds: float  # max(compute, memory) + step overhead

    @property
    def compute_bound(self) -> bool:
        return self.compute_seconds >= self.memory_seconds


class PerfModel:
    """`max(flops / (peak × mfu), bytes / (bandwidth × mbu)) + step_overhead` for a batch.

    flops = 2 × params × tokens + causal attention (QKᵀ and AV over the context);
    bytes = all weights once + the KV cache read for the context and written for new tokens.
    With tensor parallelism, peak FLOP/s and bandwidth add up over the GPUs; their
    all-reduce latency lives in the preset's step overhead.
    """

    def __init__(self, preset: Preset) -> None:
        self.preset = preset
        self._peak_flops = preset.peak_tflops * 1e12 * preset.num_gpus * preset.mfu
        self._bandwidth = preset.hbm_bandwidth_gbs * 1e9 * preset.num_gpus * preset.mbu
        self._flops_per_token = 2.0 * preset.params_b * 1e9
        # Two matmuls (QKᵀ, AV) of 2 flops per multiply-add, per layer and query head.
        self._attention_flops_unit = 4.0 * preset.num_layers * preset.num_heads * preset.head_dim
        self._overhead_seconds = preset.step_overhead_ms / 1e3

    def step(self, batch: Iterable[BatchEntry]) -> StepCost:
        tokens = 0
        attention_pairs = 0.0
        kv_tokens = 0
        for entry in batch:
            n = entry.new_tokens
            tokens += n
            # Each new token attends to the context plus the new tokens before it (causal).
            attention_pairs += n * (entry.context_tokens + (n + 1) / 2)
            kv_tokens += entry.context_tokens + n
        if tokens == 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0)
        flops = self._flops_per_token * tokens + self._attention_flops_unit * attention_pairs
        moved = self.preset.weight_bytes_total + kv_tokens * self.preset.kv_bytes_per_token
        compute = flops / self._peak_flops
        memory = moved / self._bandwidth
        seconds = max(compute, memory) + self._overhead_seconds
        return StepCost(flops, moved, compute, memory, seconds)

    def step_seconds(self, batch: Iterable[BatchEntry]) -> float:
        return self.step(batch).seconds

    def prefill_seconds(self, prompt_tokens: int) -> float:
        """A lone prompt's prefill on an idle engine: its chunks one step after another."""
        chunk = self.preset.max_num_batched_tokens
        total = 0.0
        done = 0
        while done < prompt_tokens:
            n = min(chunk, prompt_tokens - done)
            total += self.step_seconds([BatchEntry(n, done)])
            done += n
        return total
