"""The gateway against the project's engine emulator (`spanbudget engine`) on 127.0.0.1:
real vLLM-format streams, usage and time to first chunk, across a real process boundary."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.service.conftest import GatewayFactory, by_name, chat_body

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "OTEL_SDK_DISABLED": "true", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-c", "from spanbudget.cli import main; main()", "engine",
               "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"spanbudget engine exited: {process.stderr.read()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "engine emulator did not start in 60 s"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


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
