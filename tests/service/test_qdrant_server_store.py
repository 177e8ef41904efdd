"""The `QDRANT_URL` path: `qdrant-client` calls, checked without a Qdrant server.

No server can run here, so the same store code drives qdrant-client's own local mode (its
exact-search engine behind the identical client API), and an unreachable URL must fail
with a `StoreUnavailable` that names the call.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from qdrant_client import QdrantClient
from spanbudget.service.embedding import SentenceTransformerEmbedder
from spanbudget.service.faults import FaultPlan
from spanbudget.service.ingest import Document, ingest
from spanbudget.service.retrieval import Retriever
from spanbudget.service.settings import Settings
from spanbudget.service.tracers import build_tracer_provider
from spanbudget.service.vectorstore import EdgeStore, QdrantServerStore, StoreUnavailable
from spanbudget.service.wiring import build_store


@pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning")
def test_qdrant_client_store_round_trip_and_client_query_span(
    embedder: SentenceTransformerEmbedder,
) -> None:
    store = QdrantServerStore(
        QdrantClient(location=":memory:"), collection="docs", dimension=embedder.dimension
    )
    assert not store.exists()
    docs = [Document("x.md", "x", "Qdrant stores vectors."), Document("y.md", "y", "Cats nap.")]
    ingest(docs, embedder, store)
    ingest(docs, embedder, store)
    assert store.exists()
    assert store.count() == 2

    exporter = InMemorySpanExporter()
    provider = build_tracer_provider("t", processor=SimpleSpanProcessor(exporter), env={})
    retriever = Retriever(embedder, store, provider, top_k=1, hnsw_ef=32)
    import anyio

    hits = anyio.run(retriever.retrieve, "where are vectors kept?", FaultPlan())
    assert [h.source for h in hits] == ["x.md"]
    query_span = next(s for s in exporter.get_finished_spans() if s.name == "query docs")
    # Against a server the query crosses the network: a CLIENT span.
    assert query_span.kind is SpanKind.CLIENT
    assert (query_span.attributes or {})["db.query.hnsw_ef"] == 32
    store.close()
    provider.shutdown()


class _RecordingClient(QdrantClient):
    """qdrant-client's local mode, keeping the collection settings it was asked for (local
    mode accepts but does not report optimizer settings)."""

    created: dict[str, Any]

    def create_collection(self, collection_name: str, **settings: Any) -> bool:
        self.created = settings
        return bool(super().create_collection(collection_name, **settings))


@pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning")
def test_server_collection_is_indexed_however_small_and_empty_is_not_ready(
    embedder: SentenceTransformerEmbedder,
) -> None:
    client = _RecordingClient(location=":memory:")
    store = QdrantServerStore(client, collection="docs", dimension=embedder.dimension)
    store.build_index()  # creates the collection, still empty
    assert not store.exists()
    assert client.created["optimizers_config"].indexing_threshold == 1
    assert client.created["hnsw_config"].m == 16
    ingest([Document("x.md", "x", "Qdrant stores vectors.")], embedder, store)
    assert store.exists()
    store.close()


@pytest.mark.filterwarnings("ignore:Local mode performs exact:UserWarning")
def test_qdrant_client_store_drops_the_chunks_a_document_no_longer_has(
    embedder: SentenceTransformerEmbedder,
) -> None:
    store = QdrantServerStore(
        QdrantClient(location=":memory:"), collection="docs", dimension=embedder.dimension
    )
    long = Document("x.md", "x", "\n\n".join(f"Part {i}: " + "word " * 150 for i in range(3)))
    keep = Document("y.md", "y", "Cats nap.")
    assert ingest([long, keep], embedder, store, max_chars=800).chunks == 4
    ingest([Document("x.md", "x", "Now short.")], embedder, store, max_chars=800)
    assert store.count() == 2
    store.close()


def test_unreachable_qdrant_server_is_store_unavailable() -> None:
    settings = Settings(
        _env_file=None, qdrant_url="http://127.0.0.1:9", qdrant_check_compatibility=False
    )
    store = build_store(settings, 384)
    assert isinstance(store, QdrantServerStore)
    with pytest.raises(StoreUnavailable, match="collection_exists"):
        store.exists()
    with pytest.raises(StoreUnavailable, match="query_points"):
        store.query([0.0] * 384, limit=5, hnsw_ef=64)
    store.close()


def test_default_store_is_qdrant_edge_under_the_data_dir(tmp_path: object) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path)
    store = build_store(settings, 384)
    assert isinstance(store, EdgeStore)
    assert not store.remote
    assert not store.exists()
    with pytest.raises(StoreUnavailable, match="spanbudget ingest"):
        store.query([0.0] * 384, limit=5, hnsw_ef=64)
