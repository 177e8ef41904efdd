"""The span tree of a streamed RAG request, checked against DESIGN §3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from spanbudget.service.vectorstore import EdgeStore

from tests.service.conftest import GatewayFactory, by_name, chat_body, status_code_of
from tests.service.upstream import ANSWER, FakeLLM

pytestmark = pytest.mark.anyio


def _sse_data(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


async def test_streamed_request_span_tree_matches_design(
    make_gateway: GatewayFactory, fake_llm: FakeLLM
) -> None:
    gateway = make_gateway()
    async with gateway.client() as client:
        response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    events = _sse_data(response.text)
    assert events[-1] == "[DONE]"
    content = "".join(
        (json.loads(e)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
        for e in events[:-1]
    )
    assert content == "".join(ANSWER)
    # The client did not ask for usage, so the upstream usage chunk is not forwarded.
    assert all(json.loads(e)["choices"] for e in events[:-1])

    spans = gateway.spans()
    names = by_name(spans)
    expected = {
        "POST /v1/chat/completions": SpanKind.SERVER,
        "gateway.validate": SpanKind.INTERNAL,
        "auth.verify": SpanKind.INTERNAL,
        "retrieval rag-docs": SpanKind.INTERNAL,
        "embeddings all-MiniLM-L6-v2": SpanKind.INTERNAL,
        "embeddings.queue": SpanKind.INTERNAL,
        "embeddings.loop_wait": SpanKind.INTERNAL,
        "query rag-docs": SpanKind.INTERNAL,
        "prompt.render": SpanKind.INTERNAL,
        "chat test-model": SpanKind.CLIENT,
        "POST": SpanKind.CLIENT,
    }
    assert set(names) == set(expected), sorted(names)
    for name, kind in expected.items():
        assert names[name].kind is kind, name
    # No per-send/receive spans: one span a stage, and the embedding's two waits.
    assert len(spans) == len(expected)

    def parent(name: str) -> str:
        parent_ctx = names[name].parent
        assert parent_ctx is not None, f"{name} has no parent"
        return next(s.name for s in spans if s.context.span_id == parent_ctx.span_id)

    server = names["POST /v1/chat/completions"]
    assert server.parent is None
    assert {s.context.trace_id for s in spans} == {server.context.trace_id}
    for child in ("gateway.validate", "auth.verify", "retrieval rag-docs", "prompt.render"):
        assert parent(child) == server.name
    assert parent("chat test-model") == server.name
    assert parent("embeddings all-MiniLM-L6-v2") == "retrieval rag-docs"
    assert parent("embeddings.queue") == "embeddings all-MiniLM-L6-v2"
    assert parent("embeddings.loop_wait") == "embeddings all-MiniLM-L6-v2"
    assert parent("query rag-docs") == "retrieval rag-docs"
    assert parent("POST") == "chat test-model"

    validate = names["gateway.validate"].attributes or {}
    assert validate["gateway.request.message_count"] == 1
    assert validate["http.request.body.size"] > 0
    assert (names["auth.verify"].attributes or {})["auth.method"] == "none"
    retrieval = names["retrieval rag-docs"].attributes or {}
    assert retrieval["gen_ai.operation.name"] == "retrieval"
    assert retrieval["gen_ai.data_source.id"] == "rag-docs"
    embeddings = names["embeddings all-MiniLM-L6-v2"].attributes or {}
    assert embeddings["gen_ai.operation.name"] == "embeddings"
    assert embeddings["gen_ai.request.model"] == "all-MiniLM-L6-v2"
    # What the query went through: alone, it joined a batch of one and barely queued.
    assert embeddings["embeddings.batch.size"] == 1
    assert embeddings["embeddings.compute_ms"] > 0
    assert embeddings["embeddings.compute.cpu_ms"] > 0
    queue = names["embeddings.queue"]
    assert queue.start_time is not None
    assert queue.end_time is not None
    assert embeddings["embeddings.queue_ms"] == pytest.approx(
        (queue.end_time - queue.start_time) / 1e6, abs=0.01
    )
    embeddings_span = names["embeddings all-MiniLM-L6-v2"]
    assert embeddings_span.start_time is not None
    assert embeddings_span.end_time is not None
    assert embeddings_span.start_time <= queue.start_time <= queue.end_time
    # The model's own time lies between the two waits; the second ends the span.
    loop_wait = names["embeddings.loop_wait"]
    assert loop_wait.start_time is not None
    assert loop_wait.end_time is not None
    assert queue.end_time <= loop_wait.start_time <= loop_wait.end_time
    assert loop_wait.end_time <= embeddings_span.end_time
    # Between the two waits: the hand-over to the model and the model call itself.
    model_ms = (loop_wait.start_time - queue.end_time) / 1e6
    assert model_ms >= embeddings["embeddings.compute_ms"] - 0.1
    assert embeddings["embeddings.loop_wait_ms"] == pytest.approx(
        (loop_wait.end_time - loop_wait.start_time) / 1e6, abs=0.01
    )
    query = names["query rag-docs"].attributes or {}
    assert query["db.system.name"] == "qdrant"
    assert query["db.operation.name"] == "query"
    assert query["db.collection.name"] == "rag-docs"
    assert query["db.query.top_k"] == 5
    assert query["db.query.hnsw_ef"] == 64
    assert query["db.response.returned_rows"] == 5
    prompt = names["prompt.render"].attributes or {}
    assert prompt["prompt.template.id"] == "rag.j2"
    assert prompt["gen_ai.usage.input_tokens"] > 20
    assert prompt["prompt.documents.kept"] + prompt["prompt.documents.dropped"] == 5

    chat = names["chat test-model"]
    chat_attrs = chat.attributes or {}
    assert chat_attrs["gen_ai.operation.name"] == "chat"
    assert chat_attrs["gen_ai.provider.name"] == "vllm"
    assert chat_attrs["gen_ai.request.model"] == "test-model"
    assert chat_attrs["gen_ai.request.stream"] is True
    assert chat_attrs["server.address"] == "127.0.0.1"
    assert chat_attrs["gen_ai.usage.output_tokens"] == len(ANSWER)
    assert chat_attrs["gen_ai.usage.input_tokens"] > 0
    assert chat_attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert chat.status.status_code is StatusCode.UNSET

    # Time to first chunk: positive, inside the span, and the server's is the later mark.
    chat_ttfc = chat_attrs["gen_ai.response.time_to_first_chunk"]
    server_ttfc = (server.attributes or {})["gen_ai.response.time_to_first_chunk"]
    assert isinstance(chat_ttfc, float)
    assert isinstance(server_ttfc, float)
    assert chat.start_time is not None
    assert chat.end_time is not None
    assert server.start_time is not None
    assert server.end_time is not None
    assert 0 < chat_ttfc * 1e9 <= chat.end_time - chat.start_time
    assert chat.start_time + chat_ttfc * 1e9 <= server.start_time + server_ttfc * 1e9
    assert server_ttfc * 1e9 <= server.end_time - server.start_time
    assert status_code_of(server) == 200

    # W3C propagation: the upstream saw the httpx CLIENT span as its parent.
    traceparent = fake_llm.requests[-1].headers["traceparent"]
    _, trace_hex, span_hex, _ = traceparent.split("-")
    assert int(trace_hex, 16) == server.context.trace_id
    assert int(span_hex, 16) == names["POST"].context.span_id
    # The upstream was asked for usage and got the retrieved context in the prompt.
    sent = fake_llm.requests[-1].body
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["messages"][0]["role"] == "system"
    assert "yield" in sent["messages"][0]["content"]
    assert sent["messages"][-1] == {"role": "user", "content": "How does a generator work?"}


async def test_the_first_chunk_marked_is_the_first_with_content(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine (as vLLM does) sends the role first, with no content; the first token is
    the first content, 100 ms later here: the gateway's client and server spans mark that
    one, not the role's chunk (the instrumentation libraries mark the first chunk, whatever
    it holds: docs/usage.md)."""
    monkeypatch.setattr(fake_llm, "chunk_delay_seconds", 0.1)
    gateway = make_gateway()
    async with gateway.client() as client:
        response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
    assert response.status_code == 200
    names = by_name(gateway.spans())
    chat_ttfc = (names["chat test-model"].attributes or {})["gen_ai.response.time_to_first_chunk"]
    server = names["POST /v1/chat/completions"]
    server_ttfc = (server.attributes or {})["gen_ai.response.time_to_first_chunk"]
    assert isinstance(chat_ttfc, float)
    assert isinstance(server_ttfc, float)
    assert chat_ttfc >= 0.1
    assert server_ttfc >= 0.1


async def test_non_streamed_request_returns_one_completion(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway()
    async with gateway.client() as client:
        response = await client.post("/v1/chat/completions", json=chat_body())
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "".join(ANSWER)
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == len(ANSWER)
    chat = by_name(gateway.spans())["chat test-model"]
    assert "gen_ai.response.time_to_first_chunk" in (chat.attributes or {})


async def test_usage_chunk_forwarded_when_asked(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway()
    body = chat_body(stream=True, stream_options={"include_usage": True})
    async with gateway.client() as client:
        response = await client.post("/v1/chat/completions", json=body)
    events = [json.loads(e) for e in _sse_data(response.text)[:-1]]
    assert events[-1]["choices"] == []
    assert events[-1]["usage"]["completion_tokens"] == len(ANSWER)


async def test_fault_delays_land_in_their_stage_spans_and_header_is_forwarded(
    make_gateway: GatewayFactory, fake_llm: FakeLLM
) -> None:
    header = {"x-spanbudget-delay": "gateway=30,retrieval=40,prompt=50,queue=70"}
    faulty = make_gateway(faults=True)
    async with faulty.client() as client:
        response = await client.post("/v1/chat/completions", json=chat_body(), headers=header)
    assert response.status_code == 200
    assert fake_llm.requests[-1].headers["x-spanbudget-delay"] == header["x-spanbudget-delay"]
    names = by_name(faulty.spans())
    for span_name, ms in (
        ("gateway.validate", 30),
        ("retrieval rag-docs", 40),
        ("prompt.render", 50),
    ):
        span = names[span_name]
        assert (span.attributes or {})["spanbudget.fault.delay_ms"] == ms
        assert span.end_time is not None
        assert span.start_time is not None
        # Slept inside the span (1 ms slack: spans use the wall clock, sleeps the monotonic).
        assert span.end_time - span.start_time >= (ms - 1) * 1e6

    # Without --faults the header is ignored, but still forwarded.
    plain = make_gateway()
    async with plain.client() as client:
        await client.post("/v1/chat/completions", json=chat_body(), headers=header)
    assert all("spanbudget.fault.delay_ms" not in (s.attributes or {}) for s in plain.spans())
    assert fake_llm.requests[-1].headers["x-spanbudget-delay"] == header["x-spanbudget-delay"]


async def test_health_readiness_and_models(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway()
    async with gateway.client() as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        ready = await client.get("/readyz")
        models = await client.get("/v1/models")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    # The upstream's own model list, so clients can name a model the LLM serves.
    assert models.json()["data"][0]["owned_by"] == "vllm"
    assert models.json()["data"][0]["id"] == "test-model"
    # Probes and the model listing are not traced, nor is the upstream call behind the
    # listing: each trace would be judged as a request without a first token otherwise.
    assert gateway.spans() == []


async def test_readyz_is_503_without_a_collection(
    make_gateway: GatewayFactory, tmp_path: Path
) -> None:
    empty = EdgeStore(tmp_path / "rag-docs", collection="rag-docs", dimension=384)
    gateway = make_gateway(store=empty)
    async with gateway.client() as client:
        ready = await client.get("/readyz")
        chat = await client.post("/v1/chat/completions", json=chat_body())
    assert ready.status_code == 503
    assert ready.json()["status"] == "not ready"
    assert chat.status_code == 503
    assert "spanbudget ingest" in chat.json()["error"]["message"]


async def test_incoming_trace_context_and_baggage_propagate_upstream(
    make_gateway: GatewayFactory, fake_llm: FakeLLM
) -> None:
    gateway = make_gateway()
    caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    caller_span = "00f067aa0ba902b7"
    headers = {
        "traceparent": f"00-{caller_trace}-{caller_span}-01",
        "tracestate": "vendor=opaque",
        "baggage": "loadtest.run_id=run-42",
    }
    async with gateway.client() as client:
        response = await client.post("/v1/chat/completions", json=chat_body(), headers=headers)
    assert response.status_code == 200
    server = by_name(gateway.spans())["POST /v1/chat/completions"]
    assert server.parent is not None
    assert server.parent.span_id == int(caller_span, 16)
    assert server.context.trace_id == int(caller_trace, 16)
    seen = fake_llm.requests[-1].headers
    assert seen["traceparent"].split("-")[1] == caller_trace
    assert seen["tracestate"] == "vendor=opaque"
    assert seen["baggage"] == "loadtest.run_id=run-42"
