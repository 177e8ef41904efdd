"""The `llm_request` span exactly as vLLM emits it: one SERVER span per finished request.

Started at the request's arrival (vLLM's `arrival_time`, stamped before the API server's
chat template and tokenizer) and ended at once, with the phases as attributes; parented
only on the incoming W3C `traceparent`/`tracestate` (vLLM ignores baggage, B3 and Jaeger).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from spanbudget.semconv import (
    GEN_AI_LATENCY_E2E,
    GEN_AI_LATENCY_TIME_IN_MODEL_DECODE,
    GEN_AI_LATENCY_TIME_IN_MODEL_INFERENCE,
    GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
    GEN_AI_LATENCY_TIME_IN_QUEUE,
    GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN,
    GEN_AI_REQUEST_ID,
    GEN_AI_REQUEST_MAX_TOKENS,
    GEN_AI_REQUEST_N,
    GEN_AI_REQUEST_TEMPERATURE,
    GEN_AI_REQUEST_TOP_P,
    GEN_AI_USAGE_COMPLETION_TOKENS,
    GEN_AI_USAGE_PROMPT_TOKENS,
    VLLM_REQUEST_SPAN,
)
from spanbudget.service.engine.scheduler import RequestTimings

__all__ = [
    "TRACER_NAME",
    "TRACE_HEADERS",
    "RequestSpanInfo",
    "RequestTracer",
    "trace_headers",
]

TRACER_NAME = "vllm.tracing.otel"  # vLLM's tracer is `trace.get_tracer(__name__)` there
TRACE_HEADERS = ("traceparent", "tracestate")

_PROPAGATOR = TraceContextTextMapPropagator()


def trace_headers(headers: Mapping[str, str]) -> dict[str, str] | None:
    """vLLM's `_get_trace_headers`: the W3C headers, or None when neither is present."""
    found = {name: headers[name] for name in TRACE_HEADERS if name in headers}
    return found or None


@dataclass(frozen=True)
class RequestSpanInfo:
    """What the span needs from the request besides its timings.

    `request_id` is the id the engine got (vLLM's `external_req_id`). The sampling fields
    are the ones the engine ran with, not the ones the client sent: vLLM's output processor
    reads them off the request's SamplingParams, where the API server has already filled
    in defaults and the output limit (vllm/v1/engine/output_processor.py, `RequestState`).
    """

    request_id: str
    trace_headers: dict[str, str] | None
    arrival_time_ns: int = 0  # wall clock of vLLM's arrival_time (runtime.ArrivalTime)
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None


class RequestTracer:
    """Emits `llm_request` spans through an injected tracer provider."""

    def __init__(self, provider: TracerProvider) -> None:
        self._tracer = provider.get_tracer(TRACER_NAME)

    def emit(self, info: RequestSpanInfo, timings: RequestTimings) -> None:
        # A fresh Context, never the current one: without headers the span is a root.
        parent = Context()
        if info.trace_headers:
            parent = _PROPAGATOR.extract(info.trace_headers, context=Context())
        span = self._tracer.start_span(
            VLLM_REQUEST_SPAN, kind=SpanKind.SERVER, context=parent, start_time=info.arrival_time_ns
        )
        span.set_attributes(
            {
                GEN_AI_USAGE_PROMPT_TOKENS: timings.prompt_tokens,
                GEN_AI_USAGE_COMPLETION_TOKENS: timings.completion_tokens,
                GEN_AI_REQUEST_ID: info.request_id,
                GEN_AI_LATENCY_TIME_IN_QUEUE: timings.time_in_queue,
                GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN: timings.time_to_first_token,
                GEN_AI_LATENCY_E2E: timings.e2e,
                GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL: timings.time_in_model_prefill,
                GEN_AI_LATENCY_TIME_IN_MODEL_DECODE: timings.time_in_model_decode,
                GEN_AI_LATENCY_TIME_IN_MODEL_INFERENCE: timings.time_in_model_inference,
            }
        )
        # vLLM's `do_tracing` sets these only when truthy: a temperature of 0 is absent.
        optional: dict[str, float | int | None] = {
            GEN_AI_REQUEST_TOP_P: info.top_p,
            GEN_AI_REQUEST_MAX_TOKENS: info.max_tokens,
            GEN_AI_REQUEST_TEMPERATURE: info.temperature,
            GEN_AI_REQUEST_N: info.n,
        }
        for key, value in optional.items():
            if value:
                span.set_attribute(key, value)
        span.end()
