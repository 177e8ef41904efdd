"""Wiring the gateway from settings (store, retriever, prompt builder, LLM client), shared
by the CLI, the benchmark and the tests so that each builds the same object graph."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
from fastapi import FastAPI
from opentelemetry.trace import TracerProvider

from .embedding import RUNTIME_NAMES, BatchEmbedder, Embedder
from .gateway.app import create_app
from .llm_client import LLMClient
from .prompt import PromptBuilder
from .retrieval import Retriever
from .settings import Settings
from .tokens import TokenCounter
from .vectorstore import EdgeStore, HnswParams, QdrantServerStore, VectorStore

__all__ = ["build_embedder", "build_gateway", "build_store", "hnsw_params"]

log = logging.getLogger(__name__)


def hnsw_params(settings: Settings) -> HnswParams:
    return HnswParams(
        m=settings.hnsw_m,
        ef_construct=settings.hnsw_ef_construct,
        full_scan_threshold_kb=settings.full_scan_threshold_kb,
    )


def build_embedder(settings: Settings) -> tuple[Embedder | BatchEmbedder, Callable[[], None]]:
    """The query embedder as `spanbudget serve` runs it, and how to stop it.

    Call it at a process entry point: it sets torch's threads for the whole process (when
    the model runs in a thread) or spawns the embedding process.
    """
    from .embedding import SentenceTransformerEmbedder
    from .embedding_process import EmbeddingPool

    if settings.embedding_process:
        pool = EmbeddingPool(
            settings.embedding_processes,
            threads=settings.embedding_threads,
            nice=settings.embedding_nice,
            runtime=settings.embedding_runtime,
        )
        pids = ", ".join(map(str, pool.pids))
        log.info("query embeddings in process %s, %s, %s", pids, pool.priority, pool.graph)
        if pool.graph != RUNTIME_NAMES[settings.embedding_runtime]:  # a fallback
            log.warning("query model runs %s", pool.graph)
        return pool, pool.close
    if settings.embedding_threads:
        import torch

        torch.set_num_threads(settings.embedding_threads)
        torch.set_num_interop_threads(1)
    return SentenceTransformerEmbedder(runtime=settings.embedding_runtime), lambda: None


def build_store(settings: Settings, dimension: int) -> VectorStore:
    """Qdrant Edge under the data dir, or a Qdrant server when `QDRANT_URL` is set."""
    if settings.qdrant_url:
        return QdrantServerStore.connect(
            settings.qdrant_url,
            collection=settings.collection,
            dimension=dimension,
            hnsw=hnsw_params(settings),
            check_compatibility=settings.qdrant_check_compatibility,
        )
    return EdgeStore(
        settings.shard_path,
        collection=settings.collection,
        dimension=dimension,
        hnsw=hnsw_params(settings),
        search_threads=settings.qdrant_search_threads or None,
    )


def build_gateway(
    settings: Settings,
    tracer_provider: TracerProvider,
    *,
    embedder: Embedder | BatchEmbedder,
    store: VectorStore,
    counter: TokenCounter,
    llm_transport: httpx.AsyncBaseTransport | None = None,
) -> FastAPI:
    """The gateway app; it closes its LLM client at shutdown."""
    retriever = Retriever(
        embedder,
        store,
        tracer_provider,
        top_k=settings.top_k,
        hnsw_ef=settings.hnsw_ef,
        max_batch=settings.embedding_max_batch,
        batch_wait_ms=settings.embedding_batch_wait_ms,
    )
    prompt_builder = PromptBuilder(
        counter,
        tracer_provider,
        template=settings.template,
        templates_dir=settings.templates_dir,
        context_token_budget=settings.context_token_budget,
    )
    llm_client = LLMClient(
        settings.llm_base_url,
        tracer_provider,
        provider=settings.llm_provider,
        api_key=settings.llm_api_key,
        timeout_seconds=settings.llm_timeout_seconds,
        max_connections=settings.llm_max_connections,
        transport=llm_transport,
    )
    return create_app(settings, tracer_provider, retriever, prompt_builder, llm_client)
