"""Concurrent query embeddings share model calls and each caller gets its own vector."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import anyio
import pytest

from spanbudget.service.embedding import EmbeddingBatcher

pytestmark = pytest.mark.anyio


class CountingEmbedder:
    """An Embedder whose vectors encode the text; it records each call's batch."""

    model_name = "counting"
    dimension = 1

    def __init__(self, fail_on: str | None = None) -> None:
        self.batches: list[list[str]] = []
        self.fail_on = fail_on
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        # Hold the first call until every request is queued, as a slow model would.
        self.release.wait(timeout=5)
        self.batches.append(list(texts))
        if self.fail_on in texts:
            raise RuntimeError("model failed")
        return [[float(len(t))] for t in texts]


async def test_concurrent_queries_share_model_calls() -> None:
    embedder = CountingEmbedder()
    batcher = EmbeddingBatcher(embedder)
    texts = ["a" * n for n in range(1, 11)]
    results: dict[str, list[float]] = {}

    async def one(text: str) -> None:
        results[text] = await batcher.embed(text)

    async with anyio.create_task_group() as group:
        for text in texts:
            group.start_soon(one, text)
        await anyio.sleep(0.05)
        embedder.release.set()
    assert results == {t: [float(len(t))] for t in texts}
    assert sum(len(b) for b in embedder.batches) == 10
    # All ten were queued before the worker ran: far fewer model calls than requests.
    assert len(embedder.batches) <= 2


async def test_a_failed_model_call_fails_its_callers_only() -> None:
    embedder = CountingEmbedder(fail_on="bad")
    embedder.release.set()
    batcher = EmbeddingBatcher(embedder)
    with pytest.raises(RuntimeError, match="model failed"):
        await batcher.embed("bad")
    assert await batcher.embed("good") == [4.0]
