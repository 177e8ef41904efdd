"""The zoo app's requests: the shapes issue 44 lists, sent with the real `openai` client or
through a LangChain RAG chain, and what the client saw of each (`time.time_ns()`, the clock
the spans use): sent, the response headers back (returned), the first chunk, the first chunk
with content, done; and the trace each request made. Anything beyond 127.0.0.1 is refused and
recorded (`stay_offline`). Imported by zoo_app.py, in a library's venv: nothing from
spanbudget here.

Where a library does not pass the trace context to the server (openai-v2; LangChain under
either library), an httpx event hook does, as docs/usage.md shows:

    def inject(request): opentelemetry.propagate.inject(request.headers)
    client = openai.OpenAI(http_client=openai.DefaultHttpxClient(event_hooks={"request": [inject]}))
"""

from __future__ import annotations

import gc
import http.client
import socket
import time
from collections.abc import Callable
from importlib.metadata import distributions
from typing import Any

MODEL = "zoo-model"
EMBED_MODEL = "zoo-embed"
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three primes."},
]
QUESTION = "Which numbers are prime?"
HOLD_MS = 80
APP_SLEEP_S = 0.003  # the app's own work in a root span
HOLD = f"hold_ms={HOLD_MS}"
# (shape, streamed, in a root span, x-zoo controls), in the order sent.
SHAPES = [
    ("stream", True, True, ""), ("stream", True, True, HOLD),
    ("stream", True, True, ""), ("stream", True, True, HOLD),
    ("role_first", True, True, "role_first=1"), ("role_first", True, True, "role_first=1"),
    ("non_stream", False, True, ""),
    ("rag", True, True, ""),  # embeddings (and a vector store, where traced), then a stream
    ("two_calls", True, True, ""),  # a chat not streamed, then a stream
    ("no_root", True, False, ""), ("no_root", True, False, ""),
]  # fmt: skip
UPSTREAM_SHAPES = [("vllm", True, True, "upstream=1"),
                   ("vllm_alone", True, True, "upstream=1;propagate=0")]  # fmt: skip
CHAIN_SHAPES = [
    ("chain_stream", True, True, ""), ("chain_stream", True, True, HOLD),
    ("chain_stream", True, True, ""), ("chain_stream", True, True, HOLD),
    ("chain_role_first", True, True, "role_first=1"),
    ("chain_invoke", False, True, ""),
    ("chain_no_root", True, False, ""), ("chain_no_root", True, False, ""),
]  # fmt: skip
DOCS = ["Two is the only even prime.", "Three and five are primes.", "Nine is not a prime.",
        "Seven is a prime.", "The sky is blue."]  # fmt: skip

network_attempts: list[str] = []
_connect = socket.socket.connect
_getaddrinfo = socket.getaddrinfo


def _local(host: object) -> bool:
    text = host.decode() if isinstance(host, bytes) else str(host)
    return text in ("localhost", "::1") or text.startswith("127.")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if isinstance(address, tuple) and not _local(address[0]):
        network_attempts.append(f"connect {address!r}")
        raise OSError(f"offline: connection to {address!r} refused")
    _connect(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None and not _local(host):
        network_attempts.append(f"getaddrinfo {host!r}")
        raise socket.gaierror(f"offline: no lookup of {host!r}")
    return _getaddrinfo(host, *args, **kwargs)


def stay_offline() -> None:
    """Refuse (and note in `network_attempts`) any connection or look-up off 127.0.0.1."""
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.getaddrinfo = _guarded_getaddrinfo


class Started:
    """A span processor that keeps the trace ids of the spans started: how a request with
    no root span of the app's own finds its trace."""

    def __init__(self) -> None:
        self.trace_ids: list[str] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.trace_ids.append(format(span.get_span_context().trace_id, "032x"))

    def _on_ending(self, span: Any) -> None:
        pass

    def on_end(self, span: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def inject(request: Any) -> None:
    """An httpx/httpx2 request hook that passes the current trace context to the server."""
    from opentelemetry import propagate

    propagate.inject(request.headers)


def settle() -> None:
    """What start-up made lives on: out of the garbage collector's way, as a server freezes
    it once started (else a full collection of LangChain's objects stalls one request by
    100-600 ms, the same one each run)."""
    gc.collect()
    gc.freeze()


class Recorder:
    """Each request's shape, its trace and the client's times."""

    def __init__(self, started: Started) -> None:
        self.started = started
        self.requests: list[dict[str, Any]] = []

    def record(self, shape: str, stream: bool, root: bool, controls: str, send: Any) -> None:
        """Run `send(request)` (inside a root span when `root`) and keep what it saw."""
        from opentelemetry import trace

        self.started.trace_ids.clear()
        request: dict[str, Any] = {
            "shape": shape,
            "stream": stream,
            "root": root,
            "controls": controls,
            "hold_ms": HOLD_MS if "hold_ms" in controls else 0,
        }
        if root:
            tracer = trace.get_tracer("zoo-app")
            with tracer.start_as_current_span("handle question") as span:
                time.sleep(APP_SLEEP_S)
                send(request)
            request["trace_id"] = format(span.get_span_context().trace_id, "032x")
        else:
            send(request)
            ids = self.started.trace_ids
            request["trace_id"] = ids[0] if ids else None
        self.requests.append(request)


def consume(chunks: Any, request: dict[str, Any], content_of: Callable[[Any], str]) -> None:
    """Read a stream to its end, noting its first chunk and first content."""
    first = content = None
    for piece in chunks:
        now = time.time_ns()
        first = first or now
        if content is None and content_of(piece):
            content = now
        usage = getattr(piece, "usage", None)
        if usage is not None:
            request["usage"] = {"input": usage.prompt_tokens, "output": usage.completion_tokens}
    request.update(first_chunk_ns=first, first_content_ns=content, done_ns=time.time_ns())


def delta_content(piece: Any) -> str:
    return (piece.choices[0].delta.content or "") if piece.choices else ""


def run_openai(variant: str, base: str, recorder: Recorder, upstream: bool) -> None:
    import openai

    hooks = [inject] if variant == "openai-v2" else []
    client = openai.OpenAI(
        base_url=f"{base}/v1",
        api_key="sk-local",
        max_retries=0,
        http_client=openai.DefaultHttpxClient(event_hooks={"request": hooks}),
    )
    retrieve = vector_store(variant)

    def chat(request: dict[str, Any], stream: bool, controls: str) -> None:
        headers = {"x-zoo": controls} if controls else {}
        request["sent_ns"] = time.time_ns()
        if not stream:
            response = client.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_tokens=8, extra_headers=headers
            )
            request["returned_ns"] = request["done_ns"] = time.time_ns()
            usage = response.usage
            request["usage"] = {"input": usage.prompt_tokens, "output": usage.completion_tokens}
            return
        chunks = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=headers,
        )
        request["returned_ns"] = time.time_ns()
        consume(chunks, request, delta_content)

    def models(request: dict[str, Any]) -> None:
        request["sent_ns"] = time.time_ns()
        request["models"] = [m.id for m in client.models.list().data]
        request["returned_ns"] = request["done_ns"] = time.time_ns()

    settle()
    recorder.record("models.list", False, False, "", models)
    for shape, stream, root, controls in SHAPES + (UPSTREAM_SHAPES if upstream else []):

        def send(request: dict[str, Any], shape: str = shape, stream: bool = stream,
                 controls: str = controls) -> None:  # fmt: skip
            if shape == "rag":
                client.embeddings.create(model=EMBED_MODEL, input=QUESTION)
                if retrieve is not None:
                    retrieve()
            elif shape == "two_calls":
                client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8)
            chat(request, stream, controls)

        recorder.record(shape, stream, root, controls, send)


def vector_store(variant: str) -> Callable[[], object] | None:
    """A query on an in-memory Qdrant, for the libraries that trace one."""
    if variant not in ("openlit", "openlit-nohttp", "openllmetry"):
        return None
    from qdrant_client import QdrantClient, models

    client = QdrantClient(":memory:")
    params = models.VectorParams(size=4, distance=models.Distance.COSINE)
    client.create_collection(collection_name="docs", vectors_config=params)
    points = [models.PointStruct(id=i, vector=[1.0, i, i * i, 1.0 / (i + 1)]) for i in range(8)]
    client.upsert(collection_name="docs", points=points)
    return lambda: client.query_points(collection_name="docs", query=[1.0, 2.0, 3.0, 4.0], limit=3)


def run_langchain(base: str, recorder: Recorder) -> None:
    """A RAG chain as people write one: an in-memory vector store's retriever, a prompt, a
    streamed ChatOpenAI and a string parser."""
    import openai
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_openai import ChatOpenAI, OpenAIEmbeddings

    http_client = openai.DefaultHttpxClient(event_hooks={"request": [inject]})
    embeddings = OpenAIEmbeddings(
        model=EMBED_MODEL,
        base_url=f"{base}/v1",
        api_key="sk-local",
        check_embedding_ctx_length=False,  # no tiktoken, which would fetch its encodings
        http_client=http_client,
    )
    store = InMemoryVectorStore.from_texts(DOCS, embeddings)
    retriever = store.as_retriever(search_kwargs={"k": 2})
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer from the context. Context:\n{context}"), ("human", "{question}")]
    )

    def join(docs: list[Any]) -> str:
        return "\n".join(d.page_content for d in docs)

    settle()
    for shape, stream, root, controls in CHAIN_SHAPES:
        llm = ChatOpenAI(
            model=MODEL,
            base_url=f"{base}/v1",
            api_key="sk-local",
            max_retries=0,
            streaming=stream,
            stream_usage=True,
            http_client=http_client,
            default_headers={"x-zoo": controls} if controls else None,
        )
        chain = (
            {"context": retriever | join, "question": RunnablePassthrough()}
            | prompt
            | llm
            | StrOutputParser()
        )

        def send(request: dict[str, Any], chain: Any = chain, stream: bool = stream) -> None:
            request["sent_ns"] = time.time_ns()
            if stream:
                consume(chain.stream(QUESTION), request, lambda piece: piece)
            else:
                chain.invoke(QUESTION)
                request["done_ns"] = time.time_ns()

        recorder.record(shape, stream, root, controls, send)


def wait_for(port: int, seconds: float = 30.0) -> None:
    """Until the server answers /health (through http.client, which no library traces)."""
    deadline = time.monotonic() + seconds
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        finally:
            connection.close()


def versions() -> dict[str, str]:
    """Every package installed here, as `pip freeze` names it."""
    return {d.metadata["Name"].lower(): d.version for d in distributions()}
