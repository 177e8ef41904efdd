"""Refusals and failures: 401, 413, 400, 429, upstream errors, and a client that goes away."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import anyio
import httpx
import jwt
import pytest
from opentelemetry.trace import StatusCode
from spanbudget.service.embedding_process import EmbeddingProcess, EmbeddingWorkerError

from tests.asgi import post_scope
from tests.service.conftest import GatewayFactory, by_name, chat_body
from tests.service.upstream import FakeLLM
from tests.support.servers import ServerThread

pytestmark = pytest.mark.anyio

URL = "/v1/chat/completions"


async def test_missing_or_wrong_key_is_401_with_challenge(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway(api_keys="k-alpha,k-beta")
    async with gateway.client() as client:
        missing = await client.post(URL, json=chat_body())
        wrong = await client.post(URL, json=chat_body(), headers={"Authorization": "Bearer nope"})
        good = await client.post(URL, json=chat_body(), headers={"Authorization": "Bearer k-beta"})
    for response in (missing, wrong):
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith('Bearer realm="spanbudget"')
        assert response.json()["error"]["type"] == "authentication_error"
    assert good.status_code == 200
    auth_spans = [s for s in gateway.spans() if s.name == "auth.verify"]
    assert [s.status.status_code for s in auth_spans] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    accepted = auth_spans[-1].attributes or {}
    assert accepted["auth.method"] == "api_key"
    assert str(accepted["auth.key_id"]).startswith("key-")
    # Refused requests never reach retrieval.
    assert sum(s.name == "retrieval rag-docs" for s in gateway.spans()) == 1


async def test_jwt_needs_exp_aud_iss_and_an_allowed_algorithm(
    make_gateway: GatewayFactory,
) -> None:
    secret = "s3cret-for-tests-only-" + "x" * 64
    gateway = make_gateway(jwt_secret=secret, jwt_audience="rag", jwt_issuer="tests")
    now = int(time.time())
    good = jwt.encode({"sub": "u1", "exp": now + 60, "aud": "rag", "iss": "tests"}, secret)
    no_exp = jwt.encode({"sub": "u1", "aud": "rag", "iss": "tests"}, secret)
    expired = jwt.encode({"sub": "u1", "exp": now - 60, "aud": "rag", "iss": "tests"}, secret)
    other_alg = jwt.encode(
        {"sub": "u1", "exp": now + 60, "aud": "rag", "iss": "tests"}, secret, algorithm="HS512"
    )
    statuses = []
    async with gateway.client() as client:
        for token in (good, no_exp, expired, other_alg):
            response = await client.post(
                URL, json=chat_body(), headers={"Authorization": f"Bearer {token}"}
            )
            statuses.append(response.status_code)
    assert statuses == [200, 401, 401, 401]
    methods = [
        (s.attributes or {}).get("auth.method") for s in gateway.spans() if s.name == "auth.verify"
    ]
    assert methods[0] == "jwt"


async def test_body_over_the_limit_is_413(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway(max_body_bytes=2000)

    async def without_length() -> AsyncIterator[bytes]:
        # No Content-Length: the limit must hold while the body streams in.
        yield json.dumps(chat_body("y" * 5000)).encode()

    async with gateway.client() as client:
        response = await client.post(URL, json=chat_body("x" * 5000))
        chunked = await client.post(
            URL, content=without_length(), headers={"content-type": "application/json"}
        )
    for refused in (response, chunked):
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == "request_too_large"


async def test_a_body_not_in_within_the_body_timeout_is_408(make_gateway: GatewayFactory) -> None:
    """`serve --body-timeout` (`body_timeout_seconds`): a client that stops sending its body
    is answered 408 once the timeout passes, not waited on for ever."""
    gateway = make_gateway(body_timeout_seconds=0.3)

    async def stalled() -> AsyncIterator[bytes]:
        yield b'{"model": "test-model", '
        await anyio.sleep(5)  # the rest never comes in time
        yield b'"messages": []}'

    async with gateway.client() as client:
        started = time.monotonic()
        response = await client.post(
            URL, content=stalled(), headers={"content-type": "application/json"}
        )
        waited = time.monotonic() - started
    assert response.status_code == 408
    assert response.json()["error"]["code"] == "request_timeout"
    assert waited < 4  # answered at the timeout, not when the body would have finished


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b'{"messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", None),  # nested too deep
        (json.dumps({"model": "test-model", "messages": []}).encode(), "messages"),
        (
            json.dumps({"model": "m", "messages": [{"role": "wizard", "content": "hi"}]}).encode(),
            "messages.0.role",
        ),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(), "model"),
        (json.dumps(chat_body(temperature=9)).encode(), "temperature"),
        (
            json.dumps({"model": "m", "messages": [{"role": "system", "content": "s"}]}).encode(),
            "messages",
        ),
    ],
)
async def test_invalid_requests_are_400_openai_errors(
    make_gateway: GatewayFactory, body: bytes, param: str | None
) -> None:
    gateway = make_gateway()
    async with gateway.client() as client:
        response = await client.post(
            URL, content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]


async def test_rate_limit_is_429_with_retry_after(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway(api_keys="k1,k2", rate_limit_per_second=0.05, rate_limit_burst=2)
    async with gateway.client() as client:
        k1 = {"Authorization": "Bearer k1"}
        codes = [
            (await client.post(URL, json=chat_body(), headers=k1)).status_code for _ in range(3)
        ]
        refused = await client.post(URL, json=chat_body(), headers=k1)
        other_key = await client.post(URL, json=chat_body(), headers={"Authorization": "Bearer k2"})
    assert codes == [200, 200, 429]
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error"
    # One token every 20 s: the wait is whole seconds, at most 20.
    assert 1 <= int(refused.headers["retry-after"]) <= 20
    assert other_key.status_code == 200


async def test_upstream_500_before_stream_is_an_openai_error(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway()
    async with gateway.client() as client:
        response = await client.post(URL, json={**chat_body(stream=True), "model": "fail-500"})
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["type"] == "upstream_error"
    assert "engine exploded" in error["message"]
    names = by_name(gateway.spans())
    chat = names["chat fail-500"]
    assert chat.status.status_code is StatusCode.ERROR
    assert (chat.attributes or {})["error.type"] == "500"
    assert names["POST /v1/chat/completions"].status.status_code is StatusCode.ERROR


async def test_unreachable_upstream_is_502(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway(llm_base_url="http://127.0.0.1:9/v1")
    async with gateway.client() as client:
        response = await client.post(URL, json=chat_body(stream=True))
        models = await client.get("/v1/models")
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"
    # With the LLM down, /v1/models falls back to the configured model.
    assert [m["id"] for m in models.json()["data"]] == ["test-model"]
    assert by_name(gateway.spans())["chat test-model"].status.status_code is StatusCode.ERROR


async def test_upstream_dropping_mid_stream_sends_sse_error(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway()
    async with gateway.client() as client:
        body = {**chat_body(stream=True), "model": "drop-mid-stream"}
        response = await client.post(URL, json=body)
    assert response.status_code == 200
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert "[DONE]" not in data
    assert "error" in json.loads(data[-1])
    assert any("content" in json.dumps(json.loads(d)) for d in data[:-1])
    names = by_name(gateway.spans())
    chat = names["chat drop-mid-stream"]
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.end_time is not None
    assert names["POST /v1/chat/completions"].status.status_code is StatusCode.ERROR


async def test_client_disconnect_cancels_upstream_and_ends_every_span(
    make_gateway: GatewayFactory, fake_llm: FakeLLM
) -> None:
    gateway = make_gateway()
    with ServerThread(gateway.app, lifespan="on") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            body = {**chat_body(stream=True), "model": "slow"}
            async with client.stream("POST", URL, json=body) as response:
                assert response.status_code == 200
                seen = 0
                async for line in response.aiter_lines():
                    seen += line.startswith("data: ")
                    if seen >= 3:
                        break
        # Leaving the block closed the connection mid-stream.
        upstream_request = fake_llm.requests[-1]
        assert upstream_request.body["model"] == "slow"
        assert upstream_request.disconnected.wait(timeout=5), "upstream was not cancelled"
        deadline = time.monotonic() + 5
        while "POST /v1/chat/completions" not in by_name(gateway.spans()):
            assert time.monotonic() < deadline, "server span never ended"
            time.sleep(0.02)
    names = by_name(gateway.spans())
    chat = names["chat slow"]
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.status.description == "client disconnected"
    assert (chat.attributes or {})["error.type"] == "client_disconnected"
    server_span = names["POST /v1/chat/completions"]
    assert (server_span.attributes or {})["error.type"] == "client_disconnected"
    # Every span that started has ended: the 11 spans of the request are all exported.
    assert len(gateway.spans()) == 11


async def test_client_gone_before_the_stream_starts_still_ends_every_span(
    make_gateway: GatewayFactory, fake_llm: FakeLLM
) -> None:
    """The client left while the gateway was still retrieving: Starlette cancels the body
    before its first chunk is asked for, so the relay never runs; clean-up must not need it."""
    gateway = make_gateway()
    body = json.dumps({**chat_body(stream=True), "model": "slow"}).encode()
    incoming: list[dict[str, object]] = [{"type": "http.request", "body": body}]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, object]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        # A server may wait here (a paused write flow): a point where cancellation lands.
        await anyio.sleep(0)
        sent.append(message)

    scope = post_scope(URL, "gateway")
    await gateway.app(scope, receive, send)
    upstream_request = fake_llm.requests[-1]
    assert upstream_request.body["model"] == "slow"
    cancelled = await anyio.to_thread.run_sync(upstream_request.disconnected.wait, 5)
    assert cancelled, "upstream was not cancelled"
    names = by_name(gateway.spans())
    assert "chat slow" in names, "the chat span was left open"
    chat = names["chat slow"]
    assert chat.status.status_code is StatusCode.ERROR
    assert (chat.attributes or {})["error.type"] == "client_disconnected"
    server_span = names["POST /v1/chat/completions"]
    assert (server_span.attributes or {})["error.type"] == "client_disconnected"


async def test_cancelled_while_reading_an_upstream_error_still_ends_the_chat_span(
    make_gateway: GatewayFactory, fake_llm: FakeLLM
) -> None:
    gateway = make_gateway()
    before = len(fake_llm.requests)

    async def post(client: httpx.AsyncClient) -> None:
        await client.post(URL, json={**chat_body(), "model": "stall-500"})

    async with gateway.client() as client, anyio.create_task_group() as group:
        group.start_soon(post, client)
        with anyio.fail_after(10):
            while len(fake_llm.requests) == before:
                await anyio.sleep(0.01)
        # The 500 status has reached the gateway, which now waits for the error body.
        await anyio.sleep(0.2)
        group.cancel_scope.cancel()
    assert fake_llm.requests[-1].body["model"] == "stall-500"
    names = by_name(gateway.spans())
    assert "chat stall-500" in names, "the chat span was left open"
    assert names["chat stall-500"].status.status_code is StatusCode.ERROR


@pytest.mark.slow
async def test_a_dead_embedding_process_is_503_and_unhealthy(
    make_gateway: GatewayFactory,
) -> None:
    worker = EmbeddingProcess()
    try:
        gateway = make_gateway(embedding=worker)
        async with gateway.client() as client:
            assert (await client.post(URL, json=chat_body())).status_code == 200
            assert (await client.get("/healthz")).status_code == 200
            os.kill(worker.pid, signal.SIGTERM)  # sent to it alone, it ends
            with anyio.fail_after(10):
                while worker.available:
                    await anyio.sleep(0.01)
            response = await client.post(URL, json=chat_body())
            health = await client.get("/healthz")
            ready = await client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "service_unavailable"
        assert "embedding process ended" in response.json()["error"]["message"]
        # Once gone, it stays gone: orchestrators see it and restart the gateway.
        assert health.status_code == 503
        assert ready.status_code == 503
        with pytest.raises(EmbeddingWorkerError):
            await worker.embed_batch(["after the end"])
        failed = [s for s in gateway.spans() if s.status.status_code is StatusCode.ERROR]
        assert {s.name for s in failed} >= {
            "embeddings all-MiniLM-L6-v2",
            "retrieval rag-docs",
            "POST /v1/chat/completions",
        }
        # Every span of both requests ended; the failed one never reached the LLM.
        assert sum(s.name.startswith("chat ") for s in gateway.spans()) == 1
    finally:
        worker.close()
