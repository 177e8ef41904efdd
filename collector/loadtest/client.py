"""One load-test request: a streamed chat completion, traced as the root CLIENT span.

The span follows DESIGN §3 (`chat {model}`, service `spanbudget-loadtest`): it starts at
the actual send, carries the client-observed time to first chunk, and its context goes
out as W3C `traceparent`/`baggage`, so the verdict of the whole trace can be joined back.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from spanbudget.common import semconv as sc
from spanbudget.common.connections import read_to_end

from ..annotations import LOADTEST_PHASE, LOADTEST_REQUEST_INDEX, LOADTEST_RUN_ID
from ..stats import percentile
from .http1 import HTTPError, StreamingClient, sse_data

__all__ = ["DELAY_HEADER", "ChatRequest", "RequestRecord", "parse_delay", "send_chat"]

# The gateway's fault header (DESIGN §3): with faults on, it sleeps that long inside the
# named stage's span, so that a drill can slow one stage on purpose (`--delay`).
DELAY_HEADER = "x-spanbudget-delay"
DELAY_STAGES = ("gateway", "retrieval", "prompt")  # the stages the gateway can slow

_TRACECONTEXT = TraceContextTextMapPropagator()
_BAGGAGE = W3CBaggagePropagator()


@dataclass(frozen=True, slots=True)
class ChatRequest:
    index: int
    phase: str
    scheduled_s: float  # from the run's start
    prompt: str
    max_tokens: int


@dataclass(slots=True)
class RequestRecord:
    """What the client saw of one request. Times in ms; `*_sched_ms` from the scheduled time."""

    index: int
    phase: str
    scheduled_s: float
    sent_s: float = 0.0
    status_code: int = 0
    error: str = ""
    ttft_ms: float | None = None
    ttft_sched_ms: float | None = None
    itl_mean_ms: float | None = None
    itl_p95_ms: float | None = None
    total_ms: float = 0.0
    total_sched_ms: float = 0.0
    output_tokens: int = 0
    prompt_tokens: int | None = None  # as the response's usage counted them
    model: str = ""  # the model the request asked for
    sent_at: str = ""  # the wall-clock send time, RFC 3339 in UTC to the microsecond
    trace_id: str = ""
    chunk_gaps_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return not self.error and self.status_code == 200


def parse_delay(text: str) -> str:
    """`retrieval=15,prompt=5` checked and written back as the header's value; raises
    ValueError naming what to change (the gateway itself skips what it cannot read)."""
    items = []
    for item in text.split(","):
        stage, sep, raw = item.partition("=")
        stage = stage.strip().lower()
        if not sep or stage not in DELAY_STAGES:
            raise ValueError(
                f"--delay: {item.strip()!r} is not STAGE=MS with STAGE one of "
                f"{', '.join(DELAY_STAGES)}"
            )
        try:
            ms = float(raw)
        except ValueError:
            raise ValueError(f"--delay: {raw.strip()!r} is not a number of ms") from None
        if not 0 < ms <= 10_000:
            raise ValueError(f"--delay: {stage} must be within 0..10000 ms, got {raw.strip()}")
        items.append(f"{stage}={ms:g}")
    return ",".join(items)


def _content(chunk: dict[str, Any]) -> str:
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content"):
            return str(delta["content"])
    return ""


async def send_chat(
    client: StreamingClient,
    tracer: trace.Tracer,
    request: ChatRequest,
    *,
    url: str,
    model: str,
    run_id: str,
    run_start_perf: float,
    api_key: str | None = None,
    delay: str = "",
) -> RequestRecord:
    """Send one streamed request and time it; never raises for a failed request. `delay`:
    the fault header's value (`parse_delay`), sent when not empty."""
    record = RequestRecord(request.index, request.phase, request.scheduled_s, model=model)
    scheduled_perf = run_start_perf + request.scheduled_s
    body = {
        "model": model,
        "messages": [{"role": "user", "content": request.prompt}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": request.max_tokens,
    }
    send_wall_ns = time.time_ns()
    send_perf = time.perf_counter()
    record.sent_s = send_perf - run_start_perf
    record.sent_at = datetime.fromtimestamp(send_wall_ns / 1e9, UTC).isoformat(
        timespec="microseconds"
    )
    span = tracer.start_span(
        f"chat {model}",
        kind=SpanKind.CLIENT,
        start_time=send_wall_ns,
        attributes={
            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_CHAT,
            sc.GEN_AI_REQUEST_MODEL: model,
            sc.GEN_AI_REQUEST_STREAM: True,
            sc.GEN_AI_REQUEST_MAX_TOKENS: request.max_tokens,
            LOADTEST_RUN_ID: run_id,
            LOADTEST_REQUEST_INDEX: request.index,
            LOADTEST_PHASE: request.phase,
        },
    )
    record.trace_id = f"{span.get_span_context().trace_id:032x}"
    headers: dict[str, str] = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if delay:
        headers[DELAY_HEADER] = delay
    context = trace.set_span_in_context(span)
    _TRACECONTEXT.inject(headers, context=context)
    _BAGGAGE.inject(headers, context=context)
    last_chunk: float | None = None
    try:
        payload = json.dumps(body).encode()
        async with client.stream(
            "POST", url, body=payload, headers=list(headers.items())
        ) as response:
            record.status_code = response.status_code
            if record.status_code != 200:
                text = (await response.read()).decode("utf-8", "replace")
                record.error = f"HTTP {record.status_code}: {text[:200]}"
            else:
                events = sse_data(response.chunks())
                async for data in events:
                    if data == "[DONE]":
                        await read_to_end(events, HTTPError, OSError)  # keeps the connection
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:
                        record.error = f"stream error: {str(chunk['error'])[:200]}"
                        break
                    usage = chunk.get("usage")
                    if usage:
                        record.output_tokens = int(usage.get("completion_tokens") or 0)
                        record.prompt_tokens = usage.get("prompt_tokens")
                    if not _content(chunk):
                        continue
                    now = time.perf_counter()
                    if last_chunk is None:
                        record.ttft_ms = (now - send_perf) * 1000
                        record.ttft_sched_ms = (now - scheduled_perf) * 1000
                    else:
                        record.chunk_gaps_ms.append((now - last_chunk) * 1000)
                    last_chunk = now
                else:
                    record.error = record.error or "stream ended without [DONE]"
    except Exception as exc:  # a broken or foreign stream fails this request, not the run
        record.error = f"{type(exc).__name__}: {exc}"[:300]
    end_perf = time.perf_counter()
    record.total_ms = (end_perf - send_perf) * 1000
    record.total_sched_ms = (end_perf - scheduled_perf) * 1000
    if not record.output_tokens:
        record.output_tokens = len(record.chunk_gaps_ms) + (record.ttft_ms is not None)
    if record.chunk_gaps_ms:
        gaps = sorted(record.chunk_gaps_ms)
        record.itl_mean_ms = sum(gaps) / len(gaps)
        record.itl_p95_ms = percentile(gaps, 95)
    if record.ttft_ms is not None:
        span.set_attribute(sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, record.ttft_ms / 1000)
    if record.status_code:
        span.set_attribute(sc.HTTP_RESPONSE_STATUS_CODE, record.status_code)
    if record.error:
        span.set_status(StatusCode.ERROR, record.error[:120])
    span.end(end_time=send_wall_ns + round((end_perf - send_perf) * 1e9))
    return record
