"""The query model's transformer as a compiled graph: ONNX Runtime, or TorchScript.

Eager PyTorch dispatches each of the model's few hundred operators from Python, which for
a query's few rows costs more than the arithmetic: on one core of this project's 2-core
machine (an Intel Xeon with AVX-512), a lone 12-token query takes 8.3 ms eagerly. Two
graphs answer as the eager model does (to about 1e-7; 1e-5 is checked at load), and
either can run a query:

- `OnnxSentenceModel`: the transformer exported to ONNX (at load, through a temporary
  file) and run by ONNX Runtime: 2.8 ms for that query;
- `TracedSentenceModel`: traced, frozen (weights folded in as constants) and optimised for
  inference as one TorchScript graph: 4.2 ms.

(On the machine before, an AMD EPYC whose MKL ran these thin matrix products at about 40
of a core's 90 GFLOP/s, ONNX Runtime took about half the eager time, TorchScript three
quarters.)

Only the transformer is compiled: tokenising, pooling and normalising stay
sentence-transformers' own modules. Both are checked against the eager model at load.

Errors: `GraphUnavailable` when a graph cannot be built (for ONNX, also when onnx or
onnxruntime is not installed), or it does not answer as the eager model does; the caller
then keeps a slower one.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from .errors import ServiceError

__all__ = ["GraphUnavailable", "OnnxSentenceModel", "TracedSentenceModel", "padded_groups"]

# Traced and exported on a padded batch, so that the graph keeps the attention mask as an
# input; checked on other lengths than it was built with, padded and alone.
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
# ONNX opset of the export: ONNX Runtime 1.15 and later run it.
_ONNX_OPSET = 17


class GraphUnavailable(ServiceError, RuntimeError):
    """The transformer could not be compiled, or its graph disagrees with the eager model."""


@contextlib.contextmanager
def _quiet_compilation() -> Iterator[None]:
    """Tracing warns about each Python branch it records (those it records are shape
    checks that hold for every batch, checked below on other shapes), and transformers
    logs about attributes freezing reads (the unused training loss): nothing a user of the
    query model needs to see."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
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


def padded_groups(lengths: Sequence[int], *, call_tokens: int, most: int) -> list[list[int]]:
    """Indices of `lengths` in groups that share one padded forward pass, longest first.

    A row costs about as much as its padded length, and a call costs about as much as
    `call_tokens` more tokens in every row it holds (mostly reading the model's weights,
    which do not fit in cache). So a text joins the group of the longest text before it
    while that pads it by at most `call_tokens`, and at most `most` share a group.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        group = groups[-1] if groups else None
        if group and len(group) < most and lengths[group[0]] - lengths[i] <= call_tokens:
            group.append(i)
        else:
            groups.append([i])
    return groups


class _CompiledSentenceModel(abc.ABC):
    """A `SentenceTransformer` whose transformer runs as a compiled graph (`_hidden`).

    `encode` answers as `SentenceTransformer.encode(..., normalize_embeddings=True)` does,
    each text as if alone: the same tokenizer (and truncation), the model's own pooling and
    normalisation modules; texts of about the same length share a forward pass, padded to
    the longest of them (`padded_groups`), so that a short query does not pay for a long
    one's padding.
    """

    # Tokens per row that one more forward pass costs (`padded_groups`). With one thread,
    # a call cost 2-4 ms and a token 0.3 ms on the AMD machine; 1.5 ms and 0.12 ms on the
    # Intel one, where any value from 0 to 16 embeds the demo's prompts within 4 %.
    _call_tokens = 8

    def __init__(self, model: Any) -> None:
        modules = list(model)
        self._model = model
        self._after = modules[1:]  # pooling, normalisation: applied as the model does
        probe = model.preprocess(list(_TRACE_TEXTS))
        self._names = tuple(name for name in _INPUT_NAMES if name in probe)
        if "input_ids" not in self._names or "attention_mask" not in self._names:
            raise GraphUnavailable(f"unexpected model inputs: {sorted(probe)}")
        if model.tokenizer.padding_side != "right":
            raise GraphUnavailable(f"the tokenizer pads on the {model.tokenizer.padding_side}")
        self._probe = self._inputs(probe)
        self._transformer = _LastHiddenState(modules[0].model, self._names).eval()

    def _inputs(self, features: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        return tuple(features[name] for name in self._names)

    @abc.abstractmethod
    def _hidden(self, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The transformer's last hidden state for one padded batch."""

    def _check(self) -> None:
        """Raise unless the graph answers as eager encoding does, batched and alone."""
        texts = list(_CHECK_TEXTS)
        expected = self._model.encode(
            texts, normalize_embeddings=True, convert_to_tensor=True, show_progress_bar=False
        )
        try:
            batched = self._embed_features(self._model.preprocess(texts))
            alone = torch.cat([self._embed_features(self._model.preprocess([t])) for t in texts])
        except Exception as exc:  # a graph that fails on other shapes than it was built on
            raise GraphUnavailable(f"the graph failed: {type(exc).__name__}: {exc}") from exc
        error = max(float((batched - expected).abs().max()), float((alone - expected).abs().max()))
        if error > _TOLERANCE:
            raise GraphUnavailable(f"the graph is {error:.1e} off the eager model")

    @torch.inference_mode()
    def _embed_features(self, features: dict[str, Any]) -> torch.Tensor:
        """Unit-length vectors for one padded batch of tokenised texts."""
        features["token_embeddings"] = self._hidden(self._inputs(features))
        for module in self._after:
            features = module(features)
        embeddings: torch.Tensor = features["sentence_embedding"]
        return torch.nn.functional.normalize(embeddings, p=2, dim=1)

    def encode(self, texts: Sequence[str], *, batch_size: int = 64) -> list[list[float]]:
        """Unit-length vectors, one per text, in the order given."""
        if not texts:
            return []
        # One tokenizer call for all of them, padded (on the right) to the longest; each
        # group takes its rows, cut to its own longest.
        features = self._model.preprocess(list(texts))
        lengths = features["attention_mask"].sum(dim=1).tolist()
        vectors: list[list[float]] = [[] for _ in texts]
        for group in padded_groups(lengths, call_tokens=self._call_tokens, most=batch_size):
            rows, width = torch.tensor(group), lengths[group[0]]
            part = {name: features[name][rows, :width] for name in self._names}
            for i, row in zip(group, self._embed_features(part).tolist(), strict=True):
                vectors[i] = row
        return vectors


class TracedSentenceModel(_CompiledSentenceModel):
    """The transformer as a traced, frozen TorchScript graph, optimised for inference."""

    # A TorchScript call cost about 8 ms of dispatch and weight reads on the AMD machine,
    # 25 tokens' worth (on the Intel one, 8 to 32 are within 5 % of each other).
    _call_tokens = 24

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        try:
            with torch.no_grad(), _quiet_compilation():
                traced = torch.jit.trace(  # type: ignore[no-untyped-call]
                    self._transformer, self._probe, check_trace=False
                )
                self._graph: Any = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
        except Exception as exc:
            raise GraphUnavailable(f"tracing failed: {type(exc).__name__}: {exc}") from exc
        self._check()

    def _hidden(self, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        hidden: torch.Tensor = self._graph(*inputs)
        return hidden


class OnnxSentenceModel(_CompiledSentenceModel):
    """The transformer exported to ONNX and run by an ONNX Runtime session.

    The session computes with as many threads as torch is set to (`torch.get_num_threads`,
    read at load), and its threads sleep between calls rather than spin.
    """

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        try:
            import onnxruntime
        except ImportError as exc:
            raise GraphUnavailable(f"onnxruntime is not installed ({exc})") from exc
        dynamic = {0: "batch", 1: "tokens"}
        try:
            with (
                tempfile.TemporaryDirectory(prefix="spanbudget-onnx-") as directory,
                torch.no_grad(),
                _quiet_compilation(),
            ):
                exported = Path(directory) / "transformer.onnx"
                torch.onnx.export(
                    self._transformer,
                    self._probe,
                    exported,
                    input_names=list(self._names),
                    output_names=["last_hidden_state"],
                    dynamic_axes=dict.fromkeys((*self._names, "last_hidden_state"), dynamic),
                    opset_version=_ONNX_OPSET,
                    dynamo=False,  # the TorchScript exporter: no onnxscript needed
                )
                model_bytes = exported.read_bytes()
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = torch.get_num_threads()
            options.inter_op_num_threads = 1
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.log_severity_level = 3  # errors only: its optimiser's notes are not ours
            self._session = onnxruntime.InferenceSession(
                model_bytes, options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise GraphUnavailable(f"ONNX graph failed: {type(exc).__name__}: {exc}") from exc
        self._check()

    def _hidden(self, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        feeds = {name: tensor.numpy() for name, tensor in zip(self._names, inputs, strict=True)}
        (hidden,) = self._session.run(None, feeds)
        return torch.from_numpy(hidden)
