"""What the emulated model reads and writes: prompt token counts and seeded output text.

Prompts are counted with the real tokenizer after the model's chat template; the output is
a stretch of real English text, chosen by a seed, one tokenizer token per step.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..tokens import TokenCounter

__all__ = ["OutputPlan", "OutputPlanner", "render_chat_prompt"]


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    # OpenAI content parts: keep the text ones, as a text-only model's template does.
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


# Qwen2.5-Instruct's chat template opens with this system message when the request has
# none (tokenizer_config.json of the Qwen2.5 Instruct models); Qwen3's template adds none.
QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def render_chat_prompt(messages: Sequence[dict[str, Any]], template: str = "qwen3") -> str:
    """Qwen's ChatML chat template with the generation prompt, as vLLM applies it.

    `template` is the preset's: "qwen3", or "qwen2.5" with its default system message.
    """
    if template not in ("qwen3", "qwen2.5"):
        raise ValueError(f"unknown chat template {template!r}: expected qwen3 or qwen2.5")
    if template == "qwen2.5" and (not messages or messages[0].get("role") != "system"):
        messages = [{"role": "system", "content": QWEN25_DEFAULT_SYSTEM}, *messages]
    parts = [
        f"<|im_start|>{m.get('role', 'user')}\n{_content_text(m.get('content'))}<|im_end|>\n"
        for m in messages
    ]
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


@dataclass(frozen=True)
class OutputPlan:
    """The tokens a request will produce, as text pieces, and why it will stop.

    With `finish_reason == "stop"` the last token is end-of-sequence: counted, decoded as "".
    """

    pieces: tuple[str, ...]
    finish_reason: str

    @property
    def num_tokens(self) -> int:
        return len(self.pieces)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _default_corpus() -> str:
    """Prose paragraphs of the language reference shipped with the interpreter."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[key] for key in sorted(topics))
    # Indented blocks are grammar and code samples; answers read better without them.
    paragraphs = (p for p in re.split(r"\n\s*\n", text) if not p.startswith(" "))
    prose = [" ".join(p.split()) for p in paragraphs if len(p) > 200 and "::=" not in p]
    return "\n\n".join(prose)[:40_000]


class OutputPlanner:
    """Seeded, deterministic output: the same seed and prompt give the same text.

    The natural length of an answer is drawn between `min_tokens` and `max_tokens`; a
    request's `max_tokens` below that cuts it short with `finish_reason="length"`.
    """

    def __init__(
        self,
        tokenizer: TokenCounter,
        *,
        seed: int = 0,
        min_tokens: int = 32,
        max_tokens: int = 192,
        corpus: str | None = None,
    ) -> None:
        if not 1 <= min_tokens <= max_tokens:
            raise ValueError("need 1 <= min_tokens <= max_tokens")
        self.tokenizer = tokenizer
        self.seed = seed
        self.min_tokens = min_tokens
        self.max_tokens = max_tokens
        ids = tokenizer.encode(corpus if corpus is not None else _default_corpus())
        pieces = [tokenizer.decode([token]) for token in ids]
        # One token per delta: keep the tokens that decode to text on their own.
        self._pieces = [piece for piece in pieces if piece and "\ufffd" not in piece]
        if len(self._pieces) < 2 * max_tokens:
            raise ValueError("the corpus is too short for the longest answer")

    def count_prompt(self, text: str) -> int:
        return self.tokenizer.count(text)

    def plan(self, prompt: str, *, max_tokens: int | None, seed: int | None = None) -> OutputPlan:
        digest = hashlib.sha256(prompt.encode()).hexdigest()
        rng = random.Random(f"{self.seed if seed is None else seed}:{digest}")
        natural = rng.randint(self.min_tokens, self.max_tokens)
        start = rng.randrange(len(self._pieces) - natural)
        if max_tokens is not None and max_tokens < natural:
            return OutputPlan(tuple(self._pieces[start : start + max_tokens]), "length")
        # The last of the natural tokens is end-of-sequence: generated, counted, not shown.
        return OutputPlan((*self._pieces[start : start + natural - 1], ""), "stop")
