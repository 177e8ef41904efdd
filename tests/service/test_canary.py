"""Prompt text, documents and API keys never reach spans, span events or logs."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from tests.service.conftest import CANARY, GatewayFactory, chat_body
from tests.service.upstream import FakeLLM

pytestmark = pytest.mark.anyio


def _everything_exported(spans: list[ReadableSpan]) -> str:
    return "\n".join(span.to_json() for span in spans)


async def test_canary_never_appears_in_spans_events_or_logs(
    make_gateway: GatewayFactory, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api_key = f"key-{CANARY}"
    gateway = make_gateway(api_keys=api_key)
    question = f"What is the canary passphrase? Mine is {CANARY}-prompt."
    async with gateway.client() as client:
        ok = await client.post(
            "/v1/chat/completions",
            json=chat_body(question, stream=True),
            headers={"Authorization": f"Bearer {api_key}"},
        )
        wrong_key = await client.post(
            "/v1/chat/completions",
            json=chat_body(question),
            headers={"Authorization": f"Bearer {api_key}-wrong"},
        )
        bad_role = await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": CANARY, "content": CANARY}]},
            headers={"Authorization": f"Bearer {api_key}"},
        )
        failing = await client.post(
            "/v1/chat/completions",
            json={**chat_body(question, stream=True), "model": "drop-mid-stream"},
            headers={"Authorization": f"Bearer {api_key}"},
        )
    assert [ok.status_code, wrong_key.status_code, bad_role.status_code] == [200, 401, 400]
    assert failing.status_code == 200
    # The canary did travel: the retrieved document and the question reached the LLM.
    prompt = json.dumps(fake_llm.requests[-1].body)
    assert f"passphrase of the test corpus is {CANARY}" in prompt
    assert f"{CANARY}-prompt" in prompt

    spans = gateway.spans()
    assert len(spans) >= 18
    exported = _everything_exported(spans)
    assert "auth.key_id" in exported
    assert CANARY not in exported
    assert CANARY not in caplog.text
    assert all(CANARY not in record.getMessage() for record in caplog.records)
