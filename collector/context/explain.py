"""One line that says why a trace's blamed stage may have overrun, from the context its
verdict carries: `3,100-token prompt; 14 waiting, 8 running, KV cache 91%`."""

from __future__ import annotations

from collections.abc import Mapping

from spanbudget.common.semconv import GEN_AI_USAGE_INPUT_TOKENS

__all__ = ["why"]


def why(attributes: Mapping[str, object]) -> str:
    """The request's prompt and the engine's state around its arrival; empty when the
    verdict carries neither."""
    parts: list[str] = []
    tokens = attributes.get(GEN_AI_USAGE_INPUT_TOKENS)
    if isinstance(tokens, int) and not isinstance(tokens, bool):
        parts.append(f"{tokens:,}-token prompt")
    engine: list[str] = []
    for key, noun in (
        ("engine.num_requests_waiting", "waiting"),
        ("engine.num_requests_running", "running"),
    ):
        value = attributes.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            engine.append(f"{value:,.0f} {noun}")
    usage = attributes.get("engine.kv_cache_usage")
    if isinstance(usage, int | float) and not isinstance(usage, bool):
        engine.append(f"KV cache {usage:.0%}")
    if engine:
        parts.append(", ".join(engine))
    return "; ".join(parts)
