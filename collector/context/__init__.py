"""Why a stage overran: what the request asked of the engine (its prompt tokens, from the
spans) and what the engine was doing when it arrived (waiting and running requests, KV
cache use, from the engine's Prometheus metrics), as verdict attributes and as one line
of text. Pure: spans, samples and verdicts in, attributes and text out."""

from spanbudget.collector.context.annotate import Annotate, annotate_with
from spanbudget.collector.context.engine import (
    ENGINE_ATTRIBUTES,
    EngineSamples,
    parse_engine_metrics,
)
from spanbudget.collector.context.explain import why
from spanbudget.collector.context.request import arrival_ns, request_attributes

__all__ = [
    "ENGINE_ATTRIBUTES",
    "Annotate",
    "EngineSamples",
    "annotate_with",
    "arrival_ns",
    "parse_engine_metrics",
    "request_attributes",
    "why",
]
