"""The shipped GPU profiles and model configs the presets are made of, each with its source.

GPUs (NVIDIA datasheets; they quote sparse Tensor Core figures, halved here to dense):
  H200 SXM 141 GB: BF16 989 TFLOPS, FP8 1,979 TFLOPS dense; HBM3e 4.8 TB/s.
    https://www.nvidia.com/en-us/data-center/h200/
  H100 SXM5 80 GB: BF16 989 TFLOPS, FP8 1,979 TFLOPS dense; HBM3 3.35 TB/s.
    https://www.nvidia.com/en-us/data-center/h100/
  A100 SXM4 80 GB: BF16 312 TFLOPS dense; HBM2e 2,039 GB/s.
    https://www.nvidia.com/en-us/data-center/a100/
  L4 24 GB: BF16 121 TFLOPS dense (242 with sparsity); GDDR6 300 GB/s.
    https://www.nvidia.com/en-us/data-center/l4/
KV links: 50 GB/s and 0.5 ms per transfer stand for one 400 Gb/s RDMA NIC (NIXL-style
  disaggregated serving); not measured.
Models: config.json of each model on Hugging Face, in its own field names.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .gpu_profile import GpuProfile
from .model_arch import ModelArch

__all__ = [
    "GPU_PROFILES",
    "MODEL_CONFIGS",
    "get_gpu_profile",
    "get_model_arch",
    "resolve_gpu_profile",
    "resolve_model_arch",
]

# Fitted by `spanbudget engine calibrate fixtures/gpu/h200-qwen3-prefill-decode.json` to
# the GPU kernel time of Qwen3-8B and Qwen3-32B prefills (32-8,192 tokens), batched prefills
# and decode steps (batch 1-256) measured on one H200 (2026-12-04; see docs/engine-
# calibration.md). The step overhead is not in kernel times: it stands for vLLM's CPU
# scheduling between CUDA-graph replays, as on the H100 preset before (an estimate).
H200 = GpuProfile(
    name="h200",
    gpu_name="H200 SXM 141GB",
    num_gpus=1,
    peak_tflops=989.0,
    hbm_bandwidth_gbs=4800.0,
    hbm_gb=141.0,
    mfu=0.514,
    mbu=0.801,
    attn_mbu=0.278,
    layer_overhead_us=129.2,
    step_overhead_ms=1.0,
    source="fitted to H200 kernel times of Qwen3-8B/32B (fixtures/gpu, 2026-12-04)",
    fit={"prefill": 4.17, "batched prefill": 4.92, "decode": 3.23},
)

# The H100 SXM has the H200's compute (same GH100 die, same clocks) with HBM3 at 3.35 TB/s
# instead of 4.8: its matmul efficiency and per-layer floor are the H200's, its bandwidth
# shares are taken as the H200's (same memory controller; not measured on an H100).
H100 = dataclasses.replace(
    H200,
    name="h100",
    gpu_name="H100 SXM5 80GB",
    peak_tflops=989.0,
    hbm_bandwidth_gbs=3350.0,
    hbm_gb=80.0,
    source="the H200 fit with the H100's bandwidth (same compute); not measured on an H100",
    fit={},
)

# Four H100s, FP8 weights, tensor parallel: estimates (no FP8 step times measured), the
# step overhead holding 80 layers' all-reduces.
H100_FP8_TP4 = GpuProfile(
    name="4xh100-fp8",
    gpu_name="H100 SXM5 80GB",
    num_gpus=4,
    peak_tflops=1979.0,
    hbm_bandwidth_gbs=3350.0,
    hbm_gb=80.0,
    mfu=0.4,
    mbu=0.7,
    attn_mbu=0.7,
    layer_overhead_us=0.0,
    step_overhead_ms=2.5,
    source="estimates: FP8 GEMMs at 0.4 of peak, decode at 0.7 of bandwidth",
)

# A100 and L4: estimates, not measurements (roughly half of dense peak in large-GEMM
# prefill and three quarters of bandwidth in decode, as published vLLM profiles show).
A100 = GpuProfile(
    name="a100",
    gpu_name="A100 SXM4 80GB",
    num_gpus=1,
    peak_tflops=312.0,
    hbm_bandwidth_gbs=2039.0,
    hbm_gb=80.0,
    mfu=0.5,
    mbu=0.75,
    attn_mbu=0.75,
    layer_overhead_us=0.0,
    step_overhead_ms=1.5,
    source="estimates: half of peak in prefill, three quarters of bandwidth in decode",
)
L4 = dataclasses.replace(
    A100,
    name="l4",
    gpu_name="L4 24GB",
    peak_tflops=121.0,
    hbm_bandwidth_gbs=300.0,
    hbm_gb=24.0,
)

GPU_PROFILES: dict[str, GpuProfile] = {p.name: p for p in (H200, H100, H100_FP8_TP4, A100, L4)}

_QWEN3 = {
    "model_type": "qwen3",
    "head_dim": 128,
    "num_key_value_heads": 8,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    # https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
    "Qwen/Qwen3-8B": {
        **_QWEN3,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
    },
    # https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json
    "Qwen/Qwen3-32B": {
        **_QWEN3,
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
    },
    # https://huggingface.co/Qwen/Qwen2.5-72B-Instruct/blob/main/config.json, with FP8
    # weights as vLLM's `--quantization fp8` makes them.
    "Qwen/Qwen2.5-72B-Instruct": {
        "model_type": "qwen2",
        "hidden_size": 8192,
        "intermediate_size": 29568,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8"},
    },
}


def get_gpu_profile(name: str) -> GpuProfile:
    from .gpu_profile import ProfileError

    try:
        return GPU_PROFILES[name]
    except KeyError:
        known = ", ".join(GPU_PROFILES)
        raise ProfileError(f"unknown GPU profile {name!r}; known: {known}") from None


def get_model_arch(name: str) -> ModelArch:
    return ModelArch.from_config(MODEL_CONFIGS[name], model=name)


def resolve_gpu_profile(spec: str) -> GpuProfile:
    """A shipped profile's name (h200), or a profile file."""
    from pathlib import Path

    from .gpu_profile import load_profile

    if spec in GPU_PROFILES or not (Path(spec).exists() or Path(spec).suffix):
        return get_gpu_profile(spec)
    return load_profile(Path(spec))


def resolve_model_arch(spec: str) -> ModelArch:
    """A shipped model config's name (Qwen/Qwen3-8B), or a config.json."""
    from pathlib import Path

    from .model_arch import load_model_config

    if spec in MODEL_CONFIGS:
        return get_model_arch(spec)
    return load_model_config(Path(spec))
