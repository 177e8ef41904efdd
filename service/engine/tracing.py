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
from opentelemetry.trace import SpanKind, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from spanbudget.common.semconv import (
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

from .scheduler import RequestTimings, Sequence

__all__ = [
    "PHASE_SPANS",
    "TRACER_NAME",
    "TRACE_HEADERS",
    "RequestSpanInfo",
    "RequestTracer",
    "phase_spans",
    "trace_headers",
]

TRACER_NAME = "vllm.tracing.otel"  # vLLM's tracer is `trace.get_tracer(__name__)` there
TRACE_HEADERS = ("traceparent", "tracestate")

_PROPAGATOR = TraceContextTextMapPropagator()

# The request-lifecycle spans of vLLM's tracing proposal (vllm-project/vllm PR #44402),
# children of `llm_request`: time in the queue, in prefill, waiting for the KV cache from
# the prefill instance (WAITING_FOR_REMOTE_KVS), and in decode.
PHASE_SPANS = ("vllm_queue", "vllm_prefill", "vllm_async_kv_transfer", "vllm_decode")


def phase_spans(seq: Sequence) -> list[tuple[str, float, float]]:
    """A disaggregated request's phases as (span name, start, end), in seconds from its
    arrival; a phase that did not advance is left out.

    The KV transfer lasts from the prefill instance's send to the cache's arrival at the
    decode instance (vLLM's WAITING_FOR_REMOTE_KVS); decode starts there, so the wait for
    the decode instance's next step and the first token's way to the API server are
    decode's.
    """
    marks = (seq.queued_ts, seq.scheduled_ts, seq.kv_sent_ts, seq.kv_arrived_ts)
    if any(mark is None for mark in marks) or seq.last_token_ts is None:
        return []
    bounds = [float(mark) - seq.arrival for mark in (*marks, seq.last_token_ts)]  # type: ignore[arg-type]
    return [
        (name, start, end)
        for name, start, end in zip(PHASE_SPANS, bounds, bounds[1:], strict=False)
        if end > start
    ]


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

    def emit(
        self,
        info: RequestSpanInfo,
        timings: RequestTimings,
        phases: list[tuple[str, float, float]] | None = None,
    ) -> None:
        """The `llm_request` span, and `phases` (from `phase_spans`) as its children."""
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
        if phases:
            context = set_span_in_context(span, Context())
            for name, start, end in phases:
                child = self._tracer.start_span(
                    name,
                    kind=SpanKind.INTERNAL,
                    context=context,
                    start_time=info.arrival_time_ns + round(start * 1e9),
                    attributes={GEN_AI_REQUEST_ID: info.request_id},
                )
                child.end(end_time=info.arrival_time_ns + round(end * 1e9))
        span.end()
