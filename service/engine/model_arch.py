"""A model's architecture as the step-time model needs it, read from a Hugging Face config.json.

Dense decoder-only transformers (Llama, Qwen2/2.5/3, Mistral shapes): the fields keep
config.json's names where it has them, so `--model-config path/to/config.json` just works.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ServiceError

__all__ = ["ModelArch", "ModelConfigError", "load_model_config"]

_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "float8_e4m3fn": 1.0}
_REQUIRED = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
)


class ModelConfigError(ServiceError, ValueError):
    """A config.json that cannot be read, or lacks a field the step-time model needs."""


@dataclass(frozen=True)
class ModelArch:
    """The shapes that set a step's FLOPs and bytes."""

    model: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    weight_bytes: float  # bytes per parameter (2 = bf16, 1 = fp8)
    max_model_len: int

    @property
    def layer_params(self) -> int:
        """Weights of one decoder layer: the q, k, v, o projections and a gated MLP."""
        h, hd = self.hidden_size, self.head_dim
        attention = h * (self.num_heads + 2 * self.num_kv_heads) * hd + self.num_heads * hd * h
        return attention + 3 * h * self.intermediate_size

    @property
    def params(self) -> int:
        """All parameters: layers, the embedding table and (untied) the LM head; norms left
        out (under 0.01 %). Qwen3-8B's config gives 8.19 B, as the fixture's model counts."""
        embeddings = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else embeddings
        return self.num_layers * self.layer_params + embeddings + head

    @classmethod
    def from_config(cls, config: dict[str, Any], *, model: str = "", source: str = "") -> ModelArch:
        """From config.json's fields; `source` names the file in errors."""
        where = f"{source}: " if source else ""
        missing = [name for name in _REQUIRED if name not in config]
        if missing:
            raise ModelConfigError(f"{where}config.json lacks {', '.join(missing)}")
        try:
            heads = int(config["num_attention_heads"])
            hidden = int(config["hidden_size"])
            dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
            quant = config.get("quantization_config") or {}
            weight_bytes = 1.0 if quant.get("quant_method") == "fp8" else _DTYPE_BYTES.get(dtype)
            if weight_bytes is None:
                raise ModelConfigError(f"{where}unknown torch_dtype {dtype!r}")
            return cls(
                model=model or str(config.get("_name_or_path") or config.get("model_type", "")),
                hidden_size=hidden,
                intermediate_size=int(config["intermediate_size"]),
                num_layers=int(config["num_hidden_layers"]),
                num_heads=heads,
                num_kv_heads=int(config.get("num_key_value_heads") or heads),
                head_dim=int(config.get("head_dim") or hidden // heads),
                vocab_size=int(config["vocab_size"]),
                tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
                weight_bytes=weight_bytes,
                max_model_len=int(config.get("max_position_embeddings") or 32768),
            )
        except (TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, ModelConfigError):
                raise
            raise ModelConfigError(f"{where}bad config.json value: {exc}") from None


def load_model_config(path: Path, *, model: str = "") -> ModelArch:
    """Read a Hugging Face config.json."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelConfigError(f"{path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ModelConfigError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"{path}: expected a JSON object")
    return ModelArch.from_config(config, model=model, source=str(path))
