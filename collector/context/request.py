"""When a trace's request reached the engine (the engine's state then is what it met)."""

from __future__ import annotations

from collections.abc import Sequence

from spanbudget.common.semconv import VLLM_REQUEST_SPAN

from ..spans import Span

__all__ = ["arrival_ns"]


def arrival_ns(spans: Sequence[Span]) -> int | None:
    """When the request reached the engine: its `llm_request` span's start, else the
    earliest span's (the engine state around then is what it met)."""
    engine = [s.start_ns for s in spans if s.name == VLLM_REQUEST_SPAN]
    if engine:
        return min(engine)
    return min((s.start_ns for s in spans), default=None)
