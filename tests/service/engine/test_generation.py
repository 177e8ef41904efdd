"""What the emulated model reads: chat messages through the preset's chat template."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from spanbudget.service.engine.generation import (
    QWEN25_DEFAULT_SYSTEM,
    OutputPlanner,
    render_chat_prompt,
)
from spanbudget.service.engine.presets import PresetError
from spanbudget.service.tokens import TokenCounter

from .harness import build_engine, preset

USER = [{"role": "user", "content": "How late is the first token?"}]


def _chatml(messages: list[dict[str, str]]) -> str:
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


def test_qwen3_template_adds_nothing_to_the_messages() -> None:
    assert render_chat_prompt(USER) == _chatml(USER)
    assert render_chat_prompt(USER, "qwen3") == _chatml(USER)


def test_qwen25_template_opens_with_its_default_system_message_when_there_is_none() -> None:
    default = [{"role": "system", "content": QWEN25_DEFAULT_SYSTEM}]
    assert render_chat_prompt(USER, "qwen2.5") == _chatml(default + USER)
    own = [{"role": "system", "content": "Answer briefly."}, *USER]
    assert render_chat_prompt(own, "qwen2.5") == _chatml(own)


def test_an_unknown_template_is_refused() -> None:
    with pytest.raises(ValueError, match="chat template"):
        render_chat_prompt(USER, "llama3")
    with pytest.raises(PresetError, match="chat_template"):
        preset(chat_template="llama3")


@pytest.mark.parametrize(
    ("name", "system"),
    [("qwen3-8b-h100", []), ("qwen2.5-72b-fp8-4xh100", [QWEN25_DEFAULT_SYSTEM])],
)
def test_prompt_tokens_follow_the_served_models_template(
    tokenizer: TokenCounter, name: str, system: list[str]
) -> None:
    engine = build_engine(preset(name), OutputPlanner(tokenizer, seed=1))
    body = {"messages": USER, "max_tokens": 2}

    async def run() -> int:
        transport = httpx.ASGITransport(app=engine.app)
        async with (
            engine.runtime.running(),
            httpx.AsyncClient(transport=transport, base_url="http://engine") as client,
        ):
            response = await client.post("/v1/chat/completions", json=body)
            response.raise_for_status()
            return int(response.json()["usage"]["prompt_tokens"])

    messages = [{"role": "system", "content": s} for s in system] + USER
    assert asyncio.run(run()) == tokenizer.count(_chatml(messages))
