"""Why a stage overran: what the request asked of the engine (its prompt tokens, which the
evaluator reads off the LLM call) and what the engine was doing when it arrived (waiting
and running requests, KV cache use, from the engine's Prometheus metrics), as verdict
attributes and as one line of text. Pure: spans, samples and verdicts in, attributes and
text out."""

from .annotate import Annotate, annotate_with
from .engine import (
    ENGINE_ATTRIBUTES,
    EngineSamples,
    parse_engine_metrics,
)
from .explain import why
from .request import arrival_ns

__all__ = [
    "ENGINE_ATTRIBUTES",
    "Annotate",
    "EngineSamples",
    "annotate_with",
    "arrival_ns",
    "parse_engine_metrics",
    "why",
]
