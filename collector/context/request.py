"""What a trace's spans say the request asked of the engine, and when it reached it."""

from __future__ import annotations

from collections.abc import Sequence

from spanbudget.common.semconv import (
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_PROMPT_TOKENS,
    VLLM_REQUEST_SPAN,
)

from ..spans import Span

__all__ = ["arrival_ns", "request_attributes"]

# The prompt's tokens: the GenAI conventions' name, then vLLM's (`llm_request`) older one.
_PROMPT_TOKENS = (GEN_AI_USAGE_INPUT_TOKENS, GEN_AI_USAGE_PROMPT_TOKENS)


def request_attributes(spans: Sequence[Span]) -> dict[str, int]:
    """`gen_ai.usage.input_tokens` from the engine's span (vLLM's `llm_request`) or else
    the first span that counts them; empty when none does."""
    ordered = sorted(spans, key=lambda s: (s.name != VLLM_REQUEST_SPAN, s.start_ns))
    for span in ordered:
        for key in _PROMPT_TOKENS:
            value = span.attributes.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return {GEN_AI_USAGE_INPUT_TOKENS: value}
    return {}


def arrival_ns(spans: Sequence[Span]) -> int | None:
    """When the request reached the engine: its `llm_request` span's start, else the
    earliest span's (the engine state around then is what it met)."""
    engine = [s.start_ns for s in spans if s.name == VLLM_REQUEST_SPAN]
    if engine:
        return min(engine)
    return min((s.start_ns for s in spans), default=None)
