"""A GPU profile: peak rates, memory, and the efficiencies and overheads fitted to step times.

Separate from the model: the same profile times any architecture (`model_arch.ModelArch`).
Stored as JSON (`spanbudget engine calibrate --out PROFILE` writes one).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ServiceError

__all__ = ["FITTED", "GpuProfile", "ProfileError", "load_profile", "save_profile"]

# The fields a fit changes; the rest (peaks, memory, link) come from datasheets.
FITTED = ("mfu", "mbu", "attn_mbu", "layer_overhead_us")


class ProfileError(ServiceError, ValueError):
    """A profile file that cannot be read or lacks a field."""


@dataclass(frozen=True)
class GpuProfile:
    """One GPU type (times `num_gpus` with tensor parallelism) as the step-time model sees it."""

    name: str
    gpu_name: str
    num_gpus: int
    peak_tflops: float  # per GPU, dense, weight datatype
    hbm_bandwidth_gbs: float  # per GPU, GB/s
    hbm_gb: float  # per GPU
    mfu: float  # achieved share of peak FLOP/s in matmuls (and prefill attention)
    mbu: float  # achieved share of peak bandwidth streaming the weights
    attn_mbu: float  # achieved share of peak bandwidth reading the KV cache in decode
    layer_overhead_us: float  # per layer per step: norms, rotary, activations, small kernels
    step_overhead_ms: float  # per step: CPU scheduling, launches, (with TP) all-reduces
    kv_link_gbs: float = 50.0  # KV-cache transfer link between instances, GB/s
    kv_link_latency_ms: float = 0.5  # its per-transfer setup latency
    source: str = ""  # where the numbers come from
    fit: dict[str, float] = field(default_factory=dict)  # MAPE % per kind of the fit


_NUMERIC = tuple(f.name for f in dataclasses.fields(GpuProfile) if f.type in ("int", "float"))
_REQUIRED = (
    "name",
    "gpu_name",
    *(n for n in _NUMERIC if n not in ("kv_link_gbs", "kv_link_latency_ms")),
)


def load_profile(path: Path) -> GpuProfile:
    """Read a profile JSON; a missing or mistyped field is a `ProfileError` naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return profile_from_dict(data, source=str(path))


def profile_from_dict(data: Any, *, source: str = "profile") -> GpuProfile:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: expected a JSON object")
    missing = [name for name in _REQUIRED if name not in data]
    if missing:
        raise ProfileError(f"{source}: profile lacks the field(s) {', '.join(missing)}")
    known = {f.name for f in dataclasses.fields(GpuProfile)}
    values = {k: v for k, v in data.items() if k in known}
    for name in _NUMERIC:
        if name in values:
            value = values[name]
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ProfileError(f"{source}: {name} must be a non-negative number, got {value!r}")
    if not 0 < values["mfu"] <= 1 or not 0 < values["mbu"] <= 1 or not 0 < values["attn_mbu"] <= 1:
        raise ProfileError(f"{source}: mfu, mbu and attn_mbu must lie in (0, 1]")
    values["num_gpus"] = int(values["num_gpus"])
    values["fit"] = {str(k): float(v) for k, v in dict(values.get("fit") or {}).items()}
    return GpuProfile(**values)


def save_profile(profile: GpuProfile, path: Path) -> None:
    path.write_text(json.dumps(dataclasses.asdict(profile), indent=2) + "\n", encoding="utf-8")
