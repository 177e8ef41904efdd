"""Fixtures for the gateway tests: one embedding model and corpus per session, a fake LLM
served by uvicorn on 127.0.0.1, and a gateway factory with an in-memory span exporter."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spanbudget.service.embedding import BatchEmbedder, Embedder, SentenceTransformerEmbedder
from spanbudget.service.ingest import Document, ingest
from spanbudget.service.settings import Settings
from spanbudget.service.tokens import TokenCounter, load_tokenizer
from spanbudget.service.tracers import build_tracer_provider
from spanbudget.service.vectorstore import EdgeStore
from spanbudget.service.wiring import build_gateway

from tests.service.upstream import FakeLLM
from tests.support.servers import ServerThread

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# A unique string planted in a document, a prompt and an API key by the canary test.
CANARY = f"canary-{uuid.uuid4().hex}"

SMALL_CORPUS = [
    Document(
        "notes/generators.md",
        "generators",
        "A generator function uses yield to "
        "produce a sequence of values lazily, one at a time, resuming where it left off.",
    ),
    Document(
        "notes/decorators.md",
        "decorators",
        "A decorator is a callable that takes a "
        "function and returns a new function, applied with the @ syntax.",
    ),
    Document(
        "notes/context.md",
        "context managers",
        "The with statement calls __enter__ and "
        "__exit__ so resources such as files are released even when an error occurs.",
    ),
    Document(
        "notes/gil.md",
        "threads",
        "The global interpreter lock lets one thread run "
        "Python bytecode at a time; use processes for CPU-bound parallel work.",
    ),
    Document(
        "notes/asyncio.md",
        "asyncio",
        "asyncio runs coroutines on an event loop; await "
        "suspends a coroutine until the awaited future is done.",
    ),
    Document("notes/secret.md", "canary", f"The canary passphrase of the test corpus is {CANARY}."),
]


@pytest.fixture(scope="session")
def embedder() -> SentenceTransformerEmbedder:
    """The real all-MiniLM-L6-v2, loaded once for the whole session (about 10 s)."""
    return SentenceTransformerEmbedder()


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    return load_tokenizer()


@pytest.fixture(scope="session")
def small_store(
    embedder: SentenceTransformerEmbedder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EdgeStore]:
    """A real Qdrant Edge shard holding the small corpus."""
    store = EdgeStore(
        tmp_path_factory.mktemp("edge") / "rag-docs",
        collection="rag-docs",
        dimension=embedder.dimension,
    )
    ingest(SMALL_CORPUS, embedder, store)
    yield store
    store.close()


@pytest.fixture(scope="session")
def fake_llm() -> FakeLLM:
    return FakeLLM()


@pytest.fixture(scope="session")
def upstream(fake_llm: FakeLLM) -> Iterator[ServerThread]:
    with ServerThread(fake_llm, lifespan="on") as server:
        yield server


@dataclass
class Gateway:
    app: FastAPI
    exporter: InMemorySpanExporter
    provider: TracerProvider
    settings: Settings

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://gateway", **kwargs
        )


GatewayFactory = Callable[..., Gateway]


@pytest.fixture
async def make_gateway(
    embedder: SentenceTransformerEmbedder,
    counter: TokenCounter,
    small_store: EdgeStore,
    upstream: ServerThread,
) -> AsyncIterator[GatewayFactory]:
    """Build gateways against the fake LLM; each has its own in-memory span exporter."""
    built: list[Gateway] = []

    def make(
        store: EdgeStore | None = None,
        *,
        embedding: Embedder | BatchEmbedder | None = None,
        **overrides: Any,
    ) -> Gateway:
        fields: dict[str, Any] = {"llm_base_url": f"{upstream.url}/v1", "llm_model": "test-model"}
        settings = Settings(_env_file=None, **{**fields, **overrides})
        exporter = InMemorySpanExporter()
        provider = build_tracer_provider(
            "rag-gateway", processor=SimpleSpanProcessor(exporter), env={}
        )
        app = build_gateway(
            settings,
            provider,
            embedder=embedding or embedder,
            store=store or small_store,
            counter=counter,
        )
        gateway = Gateway(app, exporter, provider, settings)
        built.append(gateway)
        return gateway

    yield make
    for gateway in built:
        # The app owns its pooled LLM client; run its shutdown as the server would.
        async with gateway.app.router.lifespan_context(gateway.app):
            pass
        gateway.provider.shutdown()


def chat_body(content: str = "How does a generator work?", **extra: Any) -> dict[str, Any]:
    return {"model": "test-model", "messages": [{"role": "user", "content": content}], **extra}


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def status_code_of(span: ReadableSpan) -> object:
    """The HTTP status on a server span, under the old or the stable semconv name."""
    attributes = span.attributes or {}
    return attributes.get("http.response.status_code", attributes.get("http.status_code"))
