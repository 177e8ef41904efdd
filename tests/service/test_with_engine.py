"""The gateway against the project's engine emulator (`spanbudget engine`) on 127.0.0.1:
real vLLM-format streams, usage and time to first chunk, across a real process boundary."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from spanbudget.app.processes import Child, Supervisor

from tests.service.conftest import GatewayFactory, by_name, chat_body
from tests.support.servers import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-c", "from spanbudget.app.cli import main; main()", "engine",
               "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    log = tmp_path_factory.mktemp("engine") / "engine.log"
    env = {"OTEL_SDK_DISABLED": "true", "HF_HUB_OFFLINE": "1"}
    supervisor = Supervisor()
    supervisor.start(Child("engine", command, f"{url}/healthz", log, env))
    try:
        supervisor.wait_healthy(supervisor.children[0], 60)
        yield url
    finally:
        supervisor.stop_all()


async def test_gateway_streams_from_the_engine_emulator(
    make_gateway: GatewayFactory, engine_url: str
) -> None:
    gateway = make_gateway(llm_base_url=f"{engine_url}/v1")
    async with gateway.client() as client:
        models = (await client.get("/v1/models")).json()["data"]
        model = models[0]["id"]
        body = {**chat_body(stream=True, max_tokens=8), "model": model}
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    text = "".join(
        (json.loads(d)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
        for d in data[:-1]
    )
    assert text.strip()
    chat = by_name(gateway.spans())[f"chat {model}"]
    attributes = chat.attributes or {}
    assert attributes["gen_ai.usage.output_tokens"] == 8
    # The emulator counts the rendered prompt (with the retrieved context) with its tokenizer.
    assert attributes["gen_ai.usage.input_tokens"] > 50
    assert attributes["gen_ai.response.time_to_first_chunk"] > 0
    server = by_name(gateway.spans())["POST /v1/chat/completions"]
    assert (server.attributes or {})["gen_ai.response.time_to_first_chunk"] > 0
