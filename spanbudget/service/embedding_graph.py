"""The query model's transformer as a traced and frozen TorchScript graph.

Eager PyTorch dispatches each of the model's few hundred operators from Python; traced,
frozen (weights folded in as constants) and optimised for inference, the same forward pass
runs as one graph, about a fifth to a quarter faster for a 60-100-token query on one core.
Only the transformer is traced: tokenising, pooling and normalising stay
sentence-transformers' own modules, so the vectors are the eager model's (within 1e-6).

Errors: `GraphUnavailable` when the model cannot be traced, or its graph does not answer as
the eager model does; the caller then keeps the eager model.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch

__all__ = ["GraphUnavailable", "TracedSentenceModel"]

log = logging.getLogger(__name__)

# Traced on a padded batch, so that the graph keeps the attention mask as an input; checked
# on other lengths than it was traced with, padded and alone.
_TRACE_TEXTS = ("a short query", "a longer query, padded to the length of the other one")
_CHECK_TEXTS = (
    "yield",
    "How do I read a CSV file?",
    "Explain how Python compares and hashes objects: the rich comparison methods, what "
    "functools.total_ordering fills in, and the relationship between __eq__ and __hash__.",
)
_TOLERANCE = 1e-5
# Inputs of the transformer, in the order the graph takes them.
_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


class GraphUnavailable(RuntimeError):
    """The transformer could not be traced, or its graph disagrees with the eager model."""


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Freezing reads every attribute of the model, and transformers logs about some of
    them (the unused training loss): nothing a user of the query model needs to see."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


class _LastHiddenState(torch.nn.Module):
    """The Hugging Face model with positional inputs and one output, as tracing wants."""

    def __init__(self, model: torch.nn.Module, names: Sequence[str]) -> None:
        super().__init__()
        self.model = model
        self.names = tuple(names)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        kwargs = dict(zip(self.names, inputs, strict=True))
        output = self.model(**kwargs, return_dict=False)
        hidden: torch.Tensor = output[0]
        return hidden


class TracedSentenceModel:
    """A `SentenceTransformer` whose transformer runs as a frozen graph.

    `encode` answers as `SentenceTransformer.encode(..., normalize_embeddings=True)` does:
    the same tokenizer (and truncation), the model's own pooling and normalisation modules,
    inputs sorted by length and padded in batches of `batch_size`.
    """

    def __init__(self, model: Any) -> None:
        modules = list(model)
        transformer = modules[0]
        self._model = model
        self._after = modules[1:]  # pooling, normalisation: applied as the model does
        probe = model.preprocess(list(_TRACE_TEXTS))
        self._names = tuple(name for name in _INPUT_NAMES if name in probe)
        if "input_ids" not in self._names or "attention_mask" not in self._names:
            raise GraphUnavailable(f"unexpected model inputs: {sorted(probe)}")
        wrapped = _LastHiddenState(transformer.model, self._names).eval()
        try:
            with torch.no_grad(), warnings.catch_warnings(), _quiet_transformers():
                # Tracing warns about each Python branch it records; those it records are
                # shape checks that hold for every batch (checked below on other shapes).
                warnings.simplefilter("ignore")
                traced = torch.jit.trace(  # type: ignore[no-untyped-call]
                    wrapped, self._inputs(probe), check_trace=False
                )
                self._graph: Any = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
        except Exception as exc:
            raise GraphUnavailable(f"tracing failed: {type(exc).__name__}: {exc}") from exc
        self._check()

    def _inputs(self, features: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        return tuple(features[name] for name in self._names)

    def _check(self) -> None:
        """Raise unless the graph answers as eager encoding does, batched and alone."""
        texts = list(_CHECK_TEXTS)
        expected = self._model.encode(
            texts, normalize_embeddings=True, convert_to_tensor=True, show_progress_bar=False
        )
        batched = self._encode_tensor(texts)
        alone = torch.cat([self._encode_tensor([text]) for text in texts])
        error = max(float((batched - expected).abs().max()), float((alone - expected).abs().max()))
        if error > _TOLERANCE:
            raise GraphUnavailable(f"the traced graph is {error:.1e} off the eager model")

    @torch.inference_mode()
    def _encode_tensor(self, texts: list[str]) -> torch.Tensor:
        features = self._model.preprocess(texts)
        features["token_embeddings"] = self._graph(*self._inputs(features))
        for module in self._after:
            features = module(features)
        embeddings: torch.Tensor = features["sentence_embedding"]
        return torch.nn.functional.normalize(embeddings, p=2, dim=1)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> list[list[float]]:
        """Unit-length vectors, one per text, in the order given."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            rows = self._encode_tensor([texts[i] for i in chunk]).tolist()
            for i, row in zip(chunk, rows, strict=True):
                vectors[i] = row
        return vectors
