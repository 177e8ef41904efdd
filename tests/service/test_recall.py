"""HNSW quality on the default corpus: recall@5 against exact search at the default ef."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from spanbudget.service.embedding import SentenceTransformerEmbedder
from spanbudget.service.ingest import Document, default_corpus, ingest
from spanbudget.service.settings import Settings
from spanbudget.service.vectorstore import EdgeStore, HnswParams


@pytest.fixture(scope="session")
def default_corpus_store(
    embedder: SentenceTransformerEmbedder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EdgeStore, list[Document]]]:
    """The default corpus ingested once per session (about a minute on two cores)."""
    settings = Settings(_env_file=None)
    documents = list(default_corpus())
    store = EdgeStore(
        tmp_path_factory.mktemp("default-corpus") / settings.collection,
        collection=settings.collection,
        dimension=embedder.dimension,
        hnsw=HnswParams(
            settings.hnsw_m, settings.hnsw_ef_construct, settings.full_scan_threshold_kb
        ),
    )
    ingest(documents, embedder, store)
    yield store, documents
    store.close()


@pytest.mark.slow
def test_hnsw_recall_at_5_on_the_default_corpus(
    default_corpus_store: tuple[EdgeStore, list[Document]],
    embedder: SentenceTransformerEmbedder,
) -> None:
    store, documents = default_corpus_store
    hnsw_ef = Settings(_env_file=None).hnsw_ef
    # The corpus is real: language-reference topics and stdlib module docs.
    titles = {d.title for d in documents}
    assert {"for", "with", "assert", "json", "asyncio"} <= titles
    points = store.count()
    assert points > 500
    # Every vector sits in the HNSW graph, so the search below is approximate, not exact.
    assert store.indexed_count() == points

    queries = [f"How do I use {title} in Python?" for title in sorted(titles)]
    vectors = embedder.embed(queries)

    def recall_at_5(ef: int) -> float:
        found = 0
        for vector in vectors:
            exact = {h.id for h in store.query(vector, limit=5, hnsw_ef=ef, exact=True)}
            approx = {h.id for h in store.query(vector, limit=5, hnsw_ef=ef)}
            found += len(exact & approx)
        return found / (5 * len(vectors))

    recall = recall_at_5(hnsw_ef)
    assert recall >= 0.95, f"recall@5 = {recall:.3f} at hnsw_ef={hnsw_ef}"
    # A starved beam loses neighbours: proof that the graph, not a full scan, answered.
    assert recall_at_5(4) < recall
