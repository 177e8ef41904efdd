"""What a verdict carries besides its own numbers (the evaluator's: the LLM call's model
and tokens): with the engine's scraped samples, the engine's state when the request
arrived. The judging core calls an `Annotate` on each judged trace
(`JudgingCore(annotate=...)`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..spans import Span
from .engine import EngineSamples
from .request import arrival_ns

__all__ = ["Annotate", "annotate_with"]

Annotate = Callable[[Sequence[Span]], dict[str, str | int | float | bool]]


def annotate_with(samples: EngineSamples) -> Annotate:
    """What a trace's verdict carries besides its own: the engine's state in `samples` when
    the request arrived (counts as integers) and how old that scrape was. Without an
    engine to scrape, the core is given no `Annotate` at all."""

    def annotate(spans: Sequence[Span]) -> dict[str, str | int | float | bool]:
        out: dict[str, str | int | float | bool] = {}
        arrived = arrival_ns(spans)
        found = None if arrived is None else samples.at(arrived)
        if found is not None:
            state, age_ns = found
            for key, value in state.items():
                out[key] = round(value, 4) if key == "engine.kv_cache_usage" else round(value)
            out["engine.scrape_age_ms"] = round(age_ns / 1e6, 1)
        return out

    return annotate
