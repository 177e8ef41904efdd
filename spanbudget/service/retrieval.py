"""The retrieval stage: `retrieval {collection}` holding `embeddings {model}` and
`query {collection}` (DESIGN §3), with the CPU-bound work off the event loop."""

from __future__ import annotations

from functools import partial

import anyio
from opentelemetry.trace import SpanKind, TracerProvider

from spanbudget.service import semconv as sc
from spanbudget.service.embedding import Embedder, EmbeddingBatcher
from spanbudget.service.faults import NO_FAULTS, FaultPlan
from spanbudget.service.vectorstore import Hit, VectorStore

__all__ = ["Retriever"]


class Retriever:
    """Finds the `top_k` chunks nearest to a query, traced with the injected provider."""

    def __init__(
        self,
        embedder: Embedder,
        store: VectorStore,
        tracer_provider: TracerProvider,
        *,
        top_k: int = 5,
        hnsw_ef: int = 64,
    ) -> None:
        self._embedder = embedder
        self._store = store
        self._tracer = tracer_provider.get_tracer(__name__)
        self._top_k = top_k
        self._hnsw_ef = hnsw_ef
        # Parallel model calls only fight over two cores; concurrent queries share a call.
        self._batcher = EmbeddingBatcher(embedder)

    @property
    def collection(self) -> str:
        return self._store.collection

    def ready(self) -> bool:
        """True when the collection exists and holds points (the model loads at construction)."""
        return self._store.exists()

    async def retrieve(self, query: str, faults: FaultPlan = NO_FAULTS) -> list[Hit]:
        collection = self._store.collection
        with self._tracer.start_as_current_span(
            sc.retrieval_span_name(collection),
            attributes={
                sc.GEN_AI_OPERATION_NAME: sc.OPERATION_RETRIEVAL,
                sc.GEN_AI_DATA_SOURCE_ID: collection,
            },
        ) as span:
            await faults.inject("retrieval", span)
            with self._tracer.start_as_current_span(
                sc.embeddings_span_name(self._embedder.model_name),
                attributes={
                    sc.GEN_AI_OPERATION_NAME: sc.OPERATION_EMBEDDINGS,
                    sc.GEN_AI_REQUEST_MODEL: self._embedder.model_name,
                },
            ):
                vector = await self._batcher.embed(query)
            with self._tracer.start_as_current_span(
                sc.query_span_name(collection),
                kind=SpanKind.CLIENT if self._store.remote else SpanKind.INTERNAL,
                attributes={
                    sc.DB_SYSTEM_NAME: sc.DB_SYSTEM_QDRANT,
                    sc.DB_OPERATION_NAME: "query",
                    sc.DB_COLLECTION_NAME: collection,
                    sc.QUERY_TOP_K: self._top_k,
                    sc.QUERY_HNSW_EF: self._hnsw_ef,
                },
            ) as query_span:
                hits = await anyio.to_thread.run_sync(
                    partial(self._store.query, vector, limit=self._top_k, hnsw_ef=self._hnsw_ef)
                )
                query_span.set_attribute(sc.QUERY_HIT_COUNT, len(hits))
            return hits
