"""The real `openai` client streams a RAG answer from the gateway over HTTP."""

from __future__ import annotations

import openai
import pytest

from tests.service.conftest import GatewayFactory, by_name
from tests.service.upstream import ANSWER, FakeLLM
from tests.support.servers import ServerThread

pytestmark = pytest.mark.anyio


async def test_openai_client_streams_from_the_gateway(
    make_gateway: GatewayFactory, fake_llm: FakeLLM
) -> None:
    gateway = make_gateway(api_keys="sk-test-key")
    with ServerThread(gateway.app, lifespan="on") as server:
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="sk-test-key")
        async with client:
            models = await client.models.list()
            stream = await client.chat.completions.create(
                model="test-model",
                messages=[{"role": "user", "content": "What does the with statement do?"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            parts: list[str] = []
            usage = None
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
                usage = chunk.usage or usage
            completion = await client.chat.completions.create(
                model="test-model",
                messages=[{"role": "user", "content": "What is the GIL?"}],
            )
        wrong = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0)
        async with wrong:
            with pytest.raises(openai.AuthenticationError):
                await wrong.chat.completions.create(
                    model="test-model", messages=[{"role": "user", "content": "hi"}]
                )
    assert [m.id for m in models.data] == ["test-model"]
    assert "".join(parts) == "".join(ANSWER)
    assert usage is not None
    assert usage.completion_tokens == len(ANSWER)
    assert completion.choices[0].message.content == "".join(ANSWER)
    # The retrieved passage about `with` reached the model.
    assert "__enter__" in fake_llm.requests[-2].body["messages"][0]["content"]
    assert "chat test-model" in by_name(gateway.spans())
