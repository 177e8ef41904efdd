"""Vector stores behind one small protocol: Qdrant Edge in-process, or a Qdrant server.
Errors: `StoreError` and its `StoreUnavailable` (no collection yet, or server unreachable)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import ServiceError

__all__ = [
    "Chunk",
    "EdgeStore",
    "Hit",
    "HnswParams",
    "QdrantServerStore",
    "StoreError",
    "StoreUnavailable",
    "VectorStore",
]


class StoreError(ServiceError):
    """The vector store failed or is misconfigured."""


class StoreUnavailable(StoreError):
    """The collection does not exist yet or the server cannot be reached."""


@dataclass(frozen=True)
class Chunk:
    """A piece of a document, with an id that stays the same when ingest runs again."""

    id: str
    text: str
    source: str
    title: str


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    text: str
    source: str
    title: str


@dataclass(frozen=True)
class HnswParams:
    m: int = 16
    ef_construct: int = 100
    full_scan_threshold_kb: int = 10


class VectorStore(Protocol):
    """A collection of chunk vectors. Every method blocks: run it off the event loop.

    `remote` is True when queries cross the network (the `query` span is then CLIENT).
    """

    @property
    def collection(self) -> str: ...

    @property
    def remote(self) -> bool: ...

    def exists(self) -> bool:
        """The collection exists and holds points: retrieval can answer from it."""
        ...

    def count(self) -> int: ...

    def upsert(self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> None: ...

    def remove_stale(self, sources: Sequence[str], keep_ids: Sequence[str]) -> None:
        """Delete the chunks of `sources` whose ids are not in `keep_ids` (a document that
        shrank leaves its old tail behind otherwise)."""
        ...

    def build_index(self) -> None: ...

    def query(
        self, vector: Sequence[float], *, limit: int, hnsw_ef: int, exact: bool = False
    ) -> list[Hit]: ...

    def close(self) -> None: ...


def _payload(chunk: Chunk) -> dict[str, Any]:
    return {"text": chunk.text, "source": chunk.source, "title": chunk.title}


def _hit(point_id: object, score: float, payload: dict[str, Any] | None) -> Hit:
    payload = payload or {}
    return Hit(
        id=str(point_id),
        score=float(score),
        text=str(payload.get("text", "")),
        source=str(payload.get("source", "")),
        title=str(payload.get("title", "")),
    )


class EdgeStore:
    """Qdrant Edge: the real Qdrant engine and HNSW index, in-process, in a directory."""

    def __init__(
        self,
        path: Path,
        *,
        collection: str,
        dimension: int,
        hnsw: HnswParams = HnswParams(),
        search_threads: int | None = None,
    ) -> None:
        """`search_threads`: the shard's search thread pool, written into its config when it
        opens (None: as the shard has it; Qdrant's default derives it from the CPU count)."""
        self._path = path
        self._collection = collection
        self._dimension = dimension
        self._hnsw = hnsw
        self._search_threads = search_threads
        self._shard: Any = None
        self._lock = threading.Lock()

    @property
    def collection(self) -> str:
        return self._collection

    @property
    def remote(self) -> bool:
        return False

    def _config(self) -> Any:
        import qdrant_edge as qe

        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=self._dimension, distance=qe.Distance.Cosine),
            hnsw_config=qe.HnswIndexConfig(
                m=self._hnsw.m,
                ef_construct=self._hnsw.ef_construct,
                full_scan_threshold=self._hnsw.full_scan_threshold_kb,
            ),
            # Index every segment, however small, so queries really go through HNSW.
            optimizers=qe.EdgeOptimizersConfig(indexing_threshold=1),
        )

    def _open(self, *, create: bool) -> Any:
        if self._shard is not None:
            return self._shard
        with self._lock:
            return self._open_locked(create=create)

    def _open_locked(self, *, create: bool) -> Any:
        if self._shard is not None:
            return self._shard
        import qdrant_edge as qe

        has_data = self._path.is_dir() and any(self._path.iterdir())
        if has_data:
            if self._search_threads is None:
                self._shard = qe.EdgeShard.load(str(self._path))
            else:  # the rest of the shard's configuration stays as it was written
                vectors = qe.EdgeVectorParams(size=self._dimension, distance=qe.Distance.Cosine)
                config = qe.EdgeConfig(vectors=vectors, max_search_threads=self._search_threads)
                self._shard = qe.EdgeShard.load(str(self._path), config)
        elif create:
            self._path.mkdir(parents=True, exist_ok=True)
            self._shard = qe.EdgeShard.create(str(self._path), self._config())
        else:
            raise StoreUnavailable(
                f"collection {self._collection!r} not found under {self._path}: "
                "run `spanbudget ingest` first"
            )
        return self._shard

    def exists(self) -> bool:
        try:
            return self.count() > 0
        except StoreUnavailable:
            return False

    def count(self) -> int:
        return int(self._open(create=False).info().points_count)

    def indexed_count(self) -> int:
        """How many vectors sit in an HNSW index (the rest are searched exhaustively)."""
        return int(self._open(create=False).info().indexed_vectors_count)

    def upsert(self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> None:
        import qdrant_edge as qe

        points = [
            qe.Point(id=c.id, vector=list(v), payload=_payload(c))
            for c, v in zip(chunks, vectors, strict=True)
        ]
        self._open(create=True).update(qe.UpdateOperation.upsert_points(points))

    def remove_stale(self, sources: Sequence[str], keep_ids: Sequence[str]) -> None:
        import qdrant_edge as qe

        if not sources:
            return
        stale = qe.Filter(
            must=[qe.FieldCondition(key="source", match=qe.MatchAny(any=list(sources)))],
            must_not=[qe.HasIdCondition(point_ids=set(keep_ids))],
        )
        self._open(create=True).update(qe.UpdateOperation.delete_points_by_filter(stale))

    def build_index(self) -> None:
        shard = self._open(create=True)
        shard.optimize()
        shard.flush()

    def query(
        self, vector: Sequence[float], *, limit: int, hnsw_ef: int, exact: bool = False
    ) -> list[Hit]:
        import qdrant_edge as qe

        request = qe.QueryRequest(
            limit=limit,
            query=qe.Query.Nearest(list(vector)),
            with_payload=True,
            params=qe.SearchParams(hnsw_ef=hnsw_ef, exact=exact),
        )
        points = self._open(create=False).query(request)
        return [_hit(p.id, p.score, p.payload) for p in points]

    def close(self) -> None:
        with self._lock:
            if self._shard is not None:
                self._shard.close()
                self._shard = None


class QdrantServerStore:
    """A Qdrant server through `qdrant-client` (used when `QDRANT_URL` is set).

    `client` is injectable so the same code can drive any `QdrantClient`.
    """

    def __init__(
        self,
        client: Any,
        *,
        collection: str,
        dimension: int,
        hnsw: HnswParams = HnswParams(),
    ) -> None:
        self._client = client
        self._collection = collection
        self._dimension = dimension
        self._hnsw = hnsw

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        collection: str,
        dimension: int,
        hnsw: HnswParams = HnswParams(),
        check_compatibility: bool = True,
    ) -> QdrantServerStore:
        from qdrant_client import QdrantClient

        client = QdrantClient(url=url, check_compatibility=check_compatibility)
        return cls(client, collection=collection, dimension=dimension, hnsw=hnsw)

    @property
    def collection(self) -> str:
        return self._collection

    @property
    def remote(self) -> bool:
        return True

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StoreError:
            raise
        except Exception as exc:
            # qdrant-client raises transport errors of several libraries; name the failure.
            raise StoreUnavailable(f"qdrant {what} failed: {type(exc).__name__}: {exc}") from exc

    def exists(self) -> bool:
        return self._collection_exists() and self.count() > 0

    def _collection_exists(self) -> bool:
        return bool(
            self._call("collection_exists", self._client.collection_exists, self._collection)
        )

    def count(self) -> int:
        result = self._call("count", self._client.count, self._collection, exact=True)
        return int(result.count)

    def _ensure_collection(self) -> None:
        from qdrant_client import models

        if self._collection_exists():
            return
        self._call(
            "create_collection",
            self._client.create_collection,
            self._collection,
            vectors_config=models.VectorParams(
                size=self._dimension, distance=models.Distance.COSINE
            ),
            hnsw_config=models.HnswConfigDiff(
                m=self._hnsw.m,
                ef_construct=self._hnsw.ef_construct,
                full_scan_threshold=self._hnsw.full_scan_threshold_kb,
            ),
            # As in EdgeStore: index every segment, however small. With the server's default
            # threshold (20,000 KB) the default corpus (about 1.2 MB of vectors) would never
            # be indexed and every query would be an exhaustive scan.
            optimizers_config=models.OptimizersConfigDiff(indexing_threshold=1),
        )

    def upsert(self, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]]) -> None:
        from qdrant_client import models

        self._ensure_collection()
        points = [
            models.PointStruct(id=c.id, vector=list(v), payload=_payload(c))
            for c, v in zip(chunks, vectors, strict=True)
        ]
        self._call("upsert", self._client.upsert, self._collection, points=points, wait=True)

    def remove_stale(self, sources: Sequence[str], keep_ids: Sequence[str]) -> None:
        from qdrant_client import models

        if not sources or not self._collection_exists():
            return
        stale = models.Filter(
            must=[models.FieldCondition(key="source", match=models.MatchAny(any=list(sources)))],
            must_not=[models.HasIdCondition(has_id=list(keep_ids))],
        )
        selector = models.FilterSelector(filter=stale)
        self._call("delete", self._client.delete, self._collection, selector, wait=True)

    def build_index(self) -> None:
        # The server indexes on its own once a segment passes its indexing threshold.
        self._ensure_collection()

    def query(
        self, vector: Sequence[float], *, limit: int, hnsw_ef: int, exact: bool = False
    ) -> list[Hit]:
        from qdrant_client import models

        response = self._call(
            "query_points",
            self._client.query_points,
            self._collection,
            query=list(vector),
            limit=limit,
            with_payload=True,
            search_params=models.SearchParams(hnsw_ef=hnsw_ef, exact=exact),
        )
        return [_hit(p.id, p.score, p.payload) for p in response.points]

    def close(self) -> None:
        self._call("close", self._client.close)
