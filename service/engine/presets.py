"""Deployment presets for the engine emulator: GPU and model numbers, each with its source.

Every field is overridable (`Preset.with_overrides`, and one CLI flag per field).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from spanbudget.service.errors import ServiceError

__all__ = ["DEFAULT_PRESET", "PRESETS", "Preset", "PresetError", "get_preset", "preset_parameters"]

_GB = 1e9


class PresetError(ServiceError, ValueError):
    """An unknown preset name or an override that names no field or has a bad value."""


@dataclass(frozen=True)
class Preset:
    """One modelled deployment: hardware, model architecture and vLLM engine limits.

    Throughput figures are dense (no sparsity) per GPU, in the datatype the weights use.
    """

    name: str
    description: str
    model: str  # served model name, as `/v1/models` lists it
    # hardware
    gpu_name: str
    num_gpus: int  # tensor-parallel degree
    peak_tflops: float  # per GPU, dense, weight datatype
    hbm_bandwidth_gbs: float  # per GPU, GB/s
    hbm_gb: float  # per GPU
    # model architecture
    params_b: float  # parameters, billions
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    weight_bytes: float  # bytes per parameter (2 = bf16, 1 = fp8)
    kv_cache_bytes: float  # bytes per cached element (2 = bf16 KV cache)
    max_model_len: int
    # efficiency and engine limits
    mfu: float  # achieved share of peak FLOP/s in a step
    mbu: float  # achieved share of peak memory bandwidth in a step
    step_overhead_ms: float  # per-step CPU scheduling, launch and (with TP) all-reduce latency
    gpu_memory_utilization: float = 0.9  # vLLM's default
    reserved_gb_per_gpu: float = 2.0  # activations, CUDA graphs, non-torch memory
    block_size: int = 16  # vLLM's default KV-cache block size on CUDA
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    num_gpu_blocks: int = 0  # 0: derived from memory, as vLLM's profiler does
    chat_template: str = "qwen3"  # how chat messages become the prompt (generation.py)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type in ("int", "float") and value < 0:
                raise PresetError(f"{field.name} must not be negative, got {value}")
        for name in ("num_gpus", "num_layers", "num_heads", "num_kv_heads", "head_dim"):
            if getattr(self, name) < 1:
                raise PresetError(f"{name} must be at least 1")
        if not 0 < self.mfu <= 1 or not 0 < self.mbu <= 1:
            raise PresetError("mfu and mbu must lie in (0, 1]")
        if self.block_size < 1 or self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise PresetError("block_size, max_num_batched_tokens and max_num_seqs must be >= 1")
        if self.chat_template not in ("qwen3", "qwen2.5"):
            raise PresetError(f"chat_template must be qwen3 or qwen2.5, got {self.chat_template!r}")
        if self.kv_capacity_blocks < 1:
            raise PresetError(f"preset {self.name!r}: the weights leave no memory for a KV cache")

    @property
    def weight_bytes_total(self) -> float:
        return self.params_b * 1e9 * self.weight_bytes

    @property
    def kv_bytes_per_token(self) -> float:
        """Keys and values of every layer for one token."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_cache_bytes

    @property
    def kv_capacity_blocks(self) -> int:
        if self.num_gpu_blocks:
            return self.num_gpu_blocks
        per_gpu = self.hbm_gb * self.gpu_memory_utilization - self.reserved_gb_per_gpu
        free_bytes = self.num_gpus * per_gpu * _GB - self.weight_bytes_total
        return max(0, math.floor(free_bytes / (self.kv_bytes_per_token * self.block_size)))

    def with_overrides(self, overrides: dict[str, Any]) -> Preset:
        """A copy with some fields replaced; unknown names raise `PresetError`."""
        known = {field.name for field in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise PresetError(f"unknown preset parameter(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **overrides)


# Sources.
# GPUs (NVIDIA datasheets; the datasheets quote sparse Tensor Core figures, halved here):
#   H100 SXM5 80 GB: BF16 989 TFLOPS, FP8 1,979 TFLOPS dense; HBM3 3.35 TB/s.
#     https://www.nvidia.com/en-us/data-center/h100/
#   A100 SXM4 80 GB: BF16 312 TFLOPS dense; HBM2e 2,039 GB/s.
#     https://www.nvidia.com/en-us/data-center/a100/
#   L4 24 GB: BF16 121 TFLOPS dense (242 with sparsity); GDDR6 300 GB/s.
#     https://www.nvidia.com/en-us/data-center/l4/
# Models (config.json and model cards on Hugging Face):
#   Qwen/Qwen3-8B: 8.2 B parameters, 36 layers, 32 query / 8 KV heads, head_dim 128,
#     max_position_embeddings 40,960. https://huggingface.co/Qwen/Qwen3-8B
#   Qwen/Qwen2.5-72B-Instruct: 72.7 B parameters, 80 layers, 64 query / 8 KV heads,
#     head_dim 128, 32,768 context; FP8 weights as vLLM's `--quantization fp8` makes them.
#     https://huggingface.co/Qwen/Qwen2.5-72B-Instruct
# Engine limits: vLLM V1 defaults for `vllm serve` (engine/arg_utils.py): 8,192 batched
#   tokens and 1,024 sequences on GPUs with >= 70 GiB, 2,048 and 256 below that.
# Efficiencies are estimates, not measurements: large-GEMM prefill reaches roughly half of
#   dense peak and decode about three quarters of HBM bandwidth in published vLLM profiles;
#   the step overhead stands for CPU scheduling and kernel launches (plus all-reduces
#   across 80 layers with TP=4).
_QWEN3_8B: dict[str, Any] = {
    "model": "Qwen/Qwen3-8B",
    "params_b": 8.2,
    "num_layers": 36,
    "num_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "weight_bytes": 2.0,
    "kv_cache_bytes": 2.0,
    "max_model_len": 40960,
    "mfu": 0.5,
    "mbu": 0.75,
}

PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            name="qwen3-8b-h100",
            description="Qwen3-8B bf16 on one H100 SXM 80 GB",
            gpu_name="H100 SXM5 80GB",
            num_gpus=1,
            peak_tflops=989.0,
            hbm_bandwidth_gbs=3350.0,
            hbm_gb=80.0,
            step_overhead_ms=1.0,
            **_QWEN3_8B,
        ),
        Preset(
            name="qwen2.5-72b-fp8-4xh100",
            description="Qwen2.5-72B-Instruct FP8 on four H100 SXM 80 GB, tensor parallel 4",
            model="Qwen/Qwen2.5-72B-Instruct",
            gpu_name="H100 SXM5 80GB",
            num_gpus=4,
            peak_tflops=1979.0,
            hbm_bandwidth_gbs=3350.0,
            hbm_gb=80.0,
            params_b=72.7,
            num_layers=80,
            num_heads=64,
            num_kv_heads=8,
            head_dim=128,
            weight_bytes=1.0,
            kv_cache_bytes=2.0,
            max_model_len=32768,
            mfu=0.4,
            mbu=0.7,
            step_overhead_ms=2.5,
            chat_template="qwen2.5",
        ),
        Preset(
            name="qwen3-8b-a100",
            description="Qwen3-8B bf16 on one A100 SXM 80 GB",
            gpu_name="A100 SXM4 80GB",
            num_gpus=1,
            peak_tflops=312.0,
            hbm_bandwidth_gbs=2039.0,
            hbm_gb=80.0,
            step_overhead_ms=1.5,
            **_QWEN3_8B,
        ),
        Preset(
            name="qwen3-8b-l4",
            description="Qwen3-8B bf16 on one L4 24 GB (a small cloud inference GPU)",
            gpu_name="L4 24GB",
            num_gpus=1,
            peak_tflops=121.0,
            hbm_bandwidth_gbs=300.0,
            hbm_gb=24.0,
            step_overhead_ms=1.5,
            max_num_batched_tokens=2048,
            max_num_seqs=256,
            **{**_QWEN3_8B, "max_model_len": 16384},
        ),
    )
}

DEFAULT_PRESET = "qwen3-8b-h100"


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise PresetError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


def preset_parameters() -> frozenset[str]:
    """The numeric fields of a preset: the ones `spanbudget engine` takes as flags."""
    return frozenset(f.name for f in dataclasses.fields(Preset) if f.type in ("int", "float"))
