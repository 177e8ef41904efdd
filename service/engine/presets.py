"""Deployment presets for the engine emulator: GPU and model numbers, each with its source.

Every field is overridable (`Preset.with_overrides`, and one CLI flag per field).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ..errors import ServiceError
from .gpu_profile import GpuProfile
from .model_arch import ModelArch

__all__ = [
    "DEFAULT_PRESET",
    "PRESETS",
    "Preset",
    "PresetError",
    "compose_preset",
    "get_preset",
    "preset_parameters",
]

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
    # Refinements of the step-time model (perf_model.py); their defaults give the plain
    # roofline: all parameters as layer weights, the KV cache read at `mbu`, no layer floor.
    hidden_size: int = 0  # with vocab_size: the embedding and LM head, not per-token matmuls
    vocab_size: int = 0
    tie_word_embeddings: bool = False
    attn_mbu: float = 0.0  # share of peak bandwidth reading the KV cache (0: mbu)
    layer_overhead_us: float = 0.0  # fixed kernel time per layer and step
    kv_link_gbs: float = 50.0  # KV-cache link to another instance, GB/s
    kv_link_latency_ms: float = 0.5  # its per-transfer latency
    disaggregated: bool = False  # a prefill and a decode instance (scheduler.py)
    gpu_memory_utilization: float = 0.9  # vLLM's default
    reserved_gb_per_gpu: float = 2.0  # activations, CUDA graphs, non-torch memory
    block_size: int = 16  # vLLM's default KV-cache block size on CUDA
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    num_gpu_blocks: int = 0  # 0: derived from memory, as vLLM's profiler does
    chat_template: str = "qwen3"  # how chat messages become the prompt (generation.py)
    source: str = ""  # where the efficiencies come from, and the fit's error

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type in ("int", "float") and value < 0:
                raise PresetError(f"{field.name} must not be negative, got {value}")
        for name in ("num_gpus", "num_layers", "num_heads", "num_kv_heads", "head_dim"):
            if getattr(self, name) < 1:
                raise PresetError(f"{name} must be at least 1")
        if not 0 < self.mfu <= 1 or not 0 < self.mbu <= 1 or not 0 <= self.attn_mbu <= 1:
            raise PresetError("mfu and mbu must lie in (0, 1], attn_mbu in [0, 1]")
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

    def recomposed(self, profile: GpuProfile | None, arch: ModelArch | None) -> Preset:
        """This preset's engine limits on another GPU profile and/or model architecture."""
        limits = {
            name: getattr(self, name)
            for name in (
                "gpu_memory_utilization",
                "reserved_gb_per_gpu",
                "block_size",
                "max_num_batched_tokens",
                "max_num_seqs",
                "num_gpu_blocks",
                "chat_template",
                "kv_cache_bytes",
                "disaggregated",
            )
        }
        if arch is None:
            arch = ModelArch(
                model=self.model,
                hidden_size=self.hidden_size,
                intermediate_size=0,
                num_layers=self.num_layers,
                num_heads=self.num_heads,
                num_kv_heads=self.num_kv_heads,
                head_dim=self.head_dim,
                vocab_size=self.vocab_size,
                tie_word_embeddings=self.tie_word_embeddings,
                weight_bytes=self.weight_bytes,
                max_model_len=self.max_model_len,
            )
            preset = compose_preset(profile or self.profile(), arch, **limits)
            return dataclasses.replace(preset, params_b=self.params_b)
        return compose_preset(profile or self.profile(), arch, **limits)

    def profile(self) -> GpuProfile:
        """This preset's GPU profile."""
        return GpuProfile(
            name=self.gpu_name,
            gpu_name=self.gpu_name,
            num_gpus=self.num_gpus,
            peak_tflops=self.peak_tflops,
            hbm_bandwidth_gbs=self.hbm_bandwidth_gbs,
            hbm_gb=self.hbm_gb,
            mfu=self.mfu,
            mbu=self.mbu,
            attn_mbu=self.attn_mbu or self.mbu,
            layer_overhead_us=self.layer_overhead_us,
            step_overhead_ms=self.step_overhead_ms,
            kv_link_gbs=self.kv_link_gbs,
            kv_link_latency_ms=self.kv_link_latency_ms,
            source=self.source,
        )

    def with_overrides(self, overrides: dict[str, Any]) -> Preset:
        """A copy with some fields replaced; unknown names raise `PresetError`."""
        known = {field.name for field in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise PresetError(f"unknown preset parameter(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **overrides)


def compose_preset(
    profile: GpuProfile,
    arch: ModelArch,
    *,
    name: str = "",
    description: str = "",
    **engine: Any,
) -> Preset:
    """A preset from a GPU profile and a model architecture (plus engine limits, if any)."""
    fit = ", ".join(f"{kind} MAPE {value:.1f} %" for kind, value in profile.fit.items())
    source = "; ".join(part for part in (profile.source, fit) if part)
    return Preset(
        name=name or f"{profile.name}+{arch.model}",
        description=description or f"{arch.model} on {profile.num_gpus}x {profile.gpu_name}",
        model=arch.model,
        gpu_name=profile.gpu_name,
        num_gpus=profile.num_gpus,
        peak_tflops=profile.peak_tflops,
        hbm_bandwidth_gbs=profile.hbm_bandwidth_gbs,
        hbm_gb=profile.hbm_gb,
        params_b=arch.params / 1e9,
        num_layers=arch.num_layers,
        num_heads=arch.num_heads,
        num_kv_heads=arch.num_kv_heads,
        head_dim=arch.head_dim,
        weight_bytes=arch.weight_bytes,
        kv_cache_bytes=engine.pop("kv_cache_bytes", 2.0),
        max_model_len=engine.pop("max_model_len", arch.max_model_len),
        mfu=profile.mfu,
        mbu=profile.mbu,
        step_overhead_ms=profile.step_overhead_ms,
        hidden_size=arch.hidden_size,
        vocab_size=arch.vocab_size,
        tie_word_embeddings=arch.tie_word_embeddings,
        attn_mbu=profile.attn_mbu,
        layer_overhead_us=profile.layer_overhead_us,
        kv_link_gbs=profile.kv_link_gbs,
        kv_link_latency_ms=profile.kv_link_latency_ms,
        source=source,
        **engine,
    )


# Each preset is a GPU profile and a model config (profiles.py holds both, with sources)
# plus vLLM's engine limits: the V1 defaults for `vllm serve` (engine/arg_utils.py), 8,192
# batched tokens and 1,024 sequences on GPUs with >= 70 GiB, 2,048 and 256 below that.
# The fit error is against the H200 fixture's kernel times (docs/engine-calibration.md).
def _presets() -> dict[str, Preset]:
    from .profiles import get_gpu_profile, get_model_arch

    qwen3_8b = get_model_arch("Qwen/Qwen3-8B")
    qwen3_32b = get_model_arch("Qwen/Qwen3-32B")
    qwen25_72b = get_model_arch("Qwen/Qwen2.5-72B-Instruct")
    built = (
        compose_preset(
            get_gpu_profile("h100"),
            qwen3_8b,
            name="qwen3-8b-h100",
            description="Qwen3-8B bf16 on one H100 SXM 80 GB",
        ),
        compose_preset(
            get_gpu_profile("h200"),
            qwen3_8b,
            name="qwen3-8b-h200",
            description="Qwen3-8B bf16 on one H200 SXM 141 GB (fitted to measurements)",
        ),
        compose_preset(
            get_gpu_profile("h200"),
            qwen3_32b,
            name="qwen3-32b-h200",
            description="Qwen3-32B bf16 on one H200 SXM 141 GB (fitted to measurements)",
        ),
        compose_preset(
            get_gpu_profile("4xh100-fp8"),
            qwen25_72b,
            name="qwen2.5-72b-fp8-4xh100",
            description="Qwen2.5-72B-Instruct FP8 on four H100 SXM 80 GB, tensor parallel 4",
            max_model_len=32768,
            chat_template="qwen2.5",
        ),
        compose_preset(
            get_gpu_profile("a100"),
            qwen3_8b,
            name="qwen3-8b-a100",
            description="Qwen3-8B bf16 on one A100 SXM 80 GB",
        ),
        compose_preset(
            get_gpu_profile("l4"),
            qwen3_8b,
            name="qwen3-8b-l4",
            description="Qwen3-8B bf16 on one L4 24 GB (a small cloud inference GPU)",
            max_model_len=16384,
            max_num_batched_tokens=2048,
            max_num_seqs=256,
        ),
    )
    return {preset.name: preset for preset in built}


PRESETS: dict[str, Preset] = _presets()

DEFAULT_PRESET = "qwen3-8b-h100"


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise PresetError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


def preset_parameters() -> frozenset[str]:
    """The numeric fields of a preset: the ones `spanbudget engine` takes as flags."""
    return frozenset(f.name for f in dataclasses.fields(Preset) if f.type in ("int", "float"))
