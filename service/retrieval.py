"""The retrieval stage: `retrieval {collection}` holding `embeddings {model}` and
`query {collection}` (DESIGN §3), with the model's work off the event loop.

`embeddings {model}` carries what its query went through: the wait for the model
(`embeddings.queue_ms`), the batch it joined, the model call's wall and CPU time, and the
wait for the event loop once the answer was ready (`embeddings.loop_wait_ms`). The two
waits are also child spans, `embeddings.queue` and `embeddings.loop_wait`, so that a
verdict's retrieval breakdown tells them from the model's own time (the span's self time).
"""

from __future__ import annotations

import time
from functools import partial

import anyio
from opentelemetry.trace import SpanKind, TracerProvider
from spanbudget.common import semconv

from . import attributes as names
from .embedding import BatchEmbedder, Embedder, EmbeddingBatcher
from .faults import NO_FAULTS, FaultPlan
from .vectorstore import Hit, VectorStore

__all__ = ["Retriever"]


class Retriever:
    """Finds the `top_k` chunks nearest to a query, traced with the injected provider."""

    def __init__(
        self,
        embedder: Embedder | BatchEmbedder,
        store: VectorStore,
        tracer_provider: TracerProvider,
        *,
        top_k: int = 5,
        hnsw_ef: int = 64,
        max_batch: int = 32,
        batch_wait_ms: float = 0.0,
    ) -> None:
        self._store = store
        self._tracer = tracer_provider.get_tracer(__name__)
        self._top_k = top_k
        self._hnsw_ef = hnsw_ef
        # Parallel model calls only fight over two cores; concurrent queries share a call.
        self._batcher = EmbeddingBatcher(embedder, max_batch=max_batch, max_wait_ms=batch_wait_ms)
        self._model = self._batcher.model_name

    @property
    def collection(self) -> str:
        return self._store.collection

    @property
    def alive(self) -> bool:
        """False once the embedding model can never answer again (its process is gone)."""
        return self._batcher.available

    def ready(self) -> bool:
        """True when the model answers and the collection exists and holds points."""
        return self.alive and self._store.exists()

    async def retrieve(self, query: str, faults: FaultPlan = NO_FAULTS) -> list[Hit]:
        collection = self._store.collection
        with self._tracer.start_as_current_span(
            names.retrieval_span_name(collection),
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_RETRIEVAL,
                semconv.GEN_AI_DATA_SOURCE_ID: collection,
            },
        ) as span:
            await faults.inject("retrieval", span)
            with self._tracer.start_as_current_span(
                names.embeddings_span_name(self._model),
                attributes={
                    semconv.GEN_AI_OPERATION_NAME: semconv.OPERATION_EMBEDDINGS,
                    semconv.GEN_AI_REQUEST_MODEL: self._model,
                },
            ) as embeddings_span:
                vector, timing = await self._batcher.embed(query)
                resumed_ns = time.time_ns()
                done_ns = min(max(timing.done_ns, timing.started_ns), resumed_ns)
                embeddings_span.set_attributes(
                    {
                        names.EMBEDDINGS_QUEUE_MS: round(timing.queue_ms, 3),
                        names.EMBEDDINGS_BATCH_SIZE: timing.batch_size,
                        names.EMBEDDINGS_COMPUTE_MS: round(timing.compute_ms, 3),
                        names.EMBEDDINGS_COMPUTE_CPU_MS: round(timing.cpu_ms, 3),
                        names.EMBEDDINGS_LOOP_WAIT_MS: round((resumed_ns - done_ns) / 1e6, 3),
                    }
                )
                # Drawn after the fact, from the times the batcher and the model took.
                self._tracer.start_span(
                    names.SPAN_EMBEDDINGS_QUEUE, start_time=timing.queued_ns
                ).end(end_time=timing.started_ns)
                self._tracer.start_span(names.SPAN_EMBEDDINGS_LOOP_WAIT, start_time=done_ns).end(
                    end_time=resumed_ns
                )
            with self._tracer.start_as_current_span(
                names.query_span_name(collection),
                kind=SpanKind.CLIENT if self._store.remote else SpanKind.INTERNAL,
                attributes={
                    semconv.DB_SYSTEM_NAME: semconv.DB_SYSTEM_QDRANT,
                    semconv.DB_OPERATION_NAME: "query",
                    semconv.DB_COLLECTION_NAME: collection,
                    names.QUERY_TOP_K: self._top_k,
                    names.QUERY_HNSW_EF: self._hnsw_ef,
                },
            ) as query_span:
                search = partial(
                    self._store.query, vector, limit=self._top_k, hnsw_ef=self._hnsw_ef
                )
                # Qdrant Edge answers in well under a millisecond: a hop to a worker thread
                # costs more than that when the loop is busy. A server is network I/O.
                hits = await anyio.to_thread.run_sync(search) if self._store.remote else search()
                query_span.set_attribute(names.QUERY_HIT_COUNT, len(hits))
            return hits
