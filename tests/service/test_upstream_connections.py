"""The gateway keeps its connection to the LLM server from one request to the next."""

from __future__ import annotations

import pytest

from tests.service.conftest import GatewayFactory, by_name, chat_body
from tests.service.upstream import ANSWER, FakeLLM
from tests.support.servers import ServerThread

pytestmark = pytest.mark.anyio


async def test_streamed_requests_one_after_another_share_one_upstream_connection(
    make_gateway: GatewayFactory,
) -> None:
    """Each upstream stream is read to its end before it is closed: a stream closed at
    `[DONE]` with its body's end unread drops the connection, and every request would pay
    a TCP handshake to the LLM server inside its time to first token."""
    llm = FakeLLM()
    with ServerThread(llm, lifespan="on") as server:
        gateway = make_gateway(llm_base_url=f"{server.url}/v1")
        async with gateway.client() as client:
            for _ in range(5):
                response = await client.post("/v1/chat/completions", json=chat_body(stream=True))
                assert response.status_code == 200
                assert response.text.endswith("data: [DONE]\n\n")
                assert all(part in response.text for part in ANSWER)
    ports = [recorded.client_port for recorded in llm.requests]
    assert len(ports) == 5
    assert len(set(ports)) == 1, ports
    chat = by_name(gateway.spans())["chat test-model"]
    assert chat.status.is_ok
