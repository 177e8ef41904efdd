"""Step-time model: how long one engine step of a given batch takes on a preset.

Pure arithmetic, no clock: the scheduler asks it for each step's duration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .presets import Preset

__all__ = ["KNEE", "BatchEntry", "PerfModel", "StepCost", "soft_max"]

# How sharply a matmul turns from bandwidth- to compute-bound. Measured on the H200
# (fixtures/gpu): a Qwen3-8B prefill costs 8.9, 9.2, 9.9, 12.2 ms of kernels at 32, 64, 128,
# 256 tokens — it rises long before the compute roofline (3.7 ms of FLOPs at 128 tokens)
# crosses the weights' read (3.8 ms), which a hard max() cannot follow (its fit leaves
# 60 % MAPE on these points); the p-norm with p = 3 fits both models' prefill within 4.3 %
# (p = 2: 4.8 %, p = 4: 4.3 %).
KNEE = 3.0


def soft_max(a: float, b: float) -> float:
    """`max(a, b)` with a rounded knee where the two are close (a p-norm, p = KNEE)."""
    return float((a**KNEE + b**KNEE) ** (1.0 / KNEE))


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
    seconds: float  # layer floor + matmul roofline + attention roofline + step overhead

    @property
    def compute_bound(self) -> bool:
        return self.compute_seconds >= self.memory_seconds


class PerfModel:
    """A step is its layers' fixed work, the matmuls, and attention, one after another:

        seconds = layers × layer_overhead
                + soft_max(matmul flops / (peak × mfu), weight bytes / (bandwidth × mbu))
                + max(attention flops / (peak × mfu), KV bytes / (bandwidth × attn_mbu))
                + step_overhead

    Each term is there because the H200 measurements (fixtures/gpu) need it:
    - matmul flops are 2 × the layers' parameters per token plus the LM head for one token
      per sequence: vLLM (and the measurement) computes logits for the last token only,
      and the embedding table is looked up, not multiplied. Counting all 8.19 B parameters
      per prompt token overstates Qwen3-8B's 8,192-token prefill by 17 %.
    - the weights are read once per step: the LM head whole, the embedding table not.
    - attention runs as kernels of its own after the projections, so its time adds. In
      prefill it is compute-bound at the matmuls' efficiency (a separate efficiency fitted
      0.50 against mfu 0.51: not worth a parameter). In decode it reads the KV cache at its
      own, lower efficiency: going from 1,024 to 4,096 tokens of context at batch 32 adds
      10.5 ms for 14.5 GB, 1.4 TB/s, a third of what the weights stream at.
    - a per-layer floor (norms, rotary embedding, activations, many small kernels): a
      1-token decode of Qwen3-8B (36 layers) costs 7.7 ms and of Qwen3-32B (64 layers)
      23.2 ms; weights alone at one bandwidth cannot give both, a floor of ~0.1 ms per layer
      plus the weights at ~0.8 of peak bandwidth does.
    With tensor parallelism, peak FLOP/s and bandwidth add up over the GPUs; their
    all-reduce latency lives in the step overhead. A preset without a vocabulary size
    (`vocab_size` 0) counts all its parameters as layer weights.
    """

    def __init__(self, preset: Preset) -> None:
        self.preset = preset
        gpus = preset.num_gpus
        self._peak_flops = preset.peak_tflops * 1e12 * gpus * preset.mfu
        self._bandwidth = preset.hbm_bandwidth_gbs * 1e9 * gpus * preset.mbu
        attn_mbu = preset.attn_mbu or preset.mbu
        self._kv_bandwidth = preset.hbm_bandwidth_gbs * 1e9 * gpus * attn_mbu
        embeddings = preset.vocab_size * preset.hidden_size
        head = 0 if preset.tie_word_embeddings else embeddings
        layer_params = max(0.0, preset.params_b * 1e9 - embeddings - head)
        self._flops_per_token = 2.0 * layer_params
        self._logit_flops = 2.0 * embeddings  # one token's LM head per sequence
        self._weight_bytes = (layer_params + embeddings) * preset.weight_bytes
        # Two matmuls (QKᵀ, AV) of 2 flops per multiply-add, per layer and query head.
        self._attention_flops_unit = 4.0 * preset.num_layers * preset.num_heads * preset.head_dim
        self._fixed_seconds = (
            preset.num_layers * preset.layer_overhead_us / 1e6 + preset.step_overhead_ms / 1e3
        )

    def step(self, batch: Iterable[BatchEntry]) -> StepCost:
        tokens = 0
        sequences = 0
        attention_pairs = 0.0
        kv_tokens = 0
        for entry in batch:
            n = entry.new_tokens
            tokens += n
            sequences += 1
            # Each new token attends to the context plus the new tokens before it (causal).
            attention_pairs += n * (entry.context_tokens + (n + 1) / 2)
            kv_tokens += entry.context_tokens + n
        if tokens == 0:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0)
        matmul_flops = self._flops_per_token * tokens + self._logit_flops * sequences
        attention_flops = self._attention_flops_unit * attention_pairs
        kv_bytes = kv_tokens * self.preset.kv_bytes_per_token
        matmul = soft_max(matmul_flops / self._peak_flops, self._weight_bytes / self._bandwidth)
        attention = max(attention_flops / self._peak_flops, kv_bytes / self._kv_bandwidth)
        flops = matmul_flops + attention_flops
        compute = flops / self._peak_flops
        memory = self._weight_bytes / self._bandwidth + kv_bytes / self._kv_bandwidth
        seconds = self._fixed_seconds + matmul + attention
        return StepCost(flops, self._weight_bytes + kv_bytes, compute, memory, seconds)

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
