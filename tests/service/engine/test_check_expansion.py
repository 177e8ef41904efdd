"""`spanbudget check` on a trace whose vLLM part is the emulator's real `llm_request` span:
the span's phases come out as vllm.queue and vllm.prefill in the prefill stage."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from spanbudget.app.cli import app
from spanbudget.service.engine.generation import OutputPlanner
from spanbudget.service.tracers import build_tracer_provider
from typer.testing import CliRunner

from .harness import bench_style_stream, build_engine, filler_text, preset, serve

BUDGET = Path(__file__).resolve().parents[3] / "budget.yaml"


def _caller_and_engine_spans(planner: OutputPlanner) -> list[ReadableSpan]:
    """A gateway-shaped caller (SERVER root, `chat` CLIENT child) calling the emulator."""
    engine = build_engine(preset("qwen3-8b-a100"), planner, faults=True)
    caller_spans = InMemorySpanExporter()
    provider = build_tracer_provider(
        "rag-gateway", processor=SimpleSpanProcessor(caller_spans), env={}
    )
    tracer = provider.get_tracer("tests.engine")

    async def run() -> None:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            with (
                tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER),
                tracer.start_as_current_span(
                    "chat Qwen/Qwen3-8B",
                    kind=SpanKind.CLIENT,
                    attributes={"gen_ai.operation.name": "chat"},
                ) as chat,
            ):
                headers = {"x-spanbudget-delay": "queue=40,prefill=30"}
                TraceContextTextMapPropagator().inject(headers, set_span_in_context(chat))
                body = {
                    "messages": [{"role": "user", "content": filler_text(300)}],
                    "stream": True,
                    "max_tokens": 4,
                }
                await bench_style_stream(client, "/v1/chat/completions", body, headers)

    asyncio.run(run())
    provider.shutdown()
    return [*caller_spans.get_finished_spans(), *engine.spans.get_finished_spans()]


def test_check_expands_the_emulator_span_into_queue_and_prefill(
    planner: OutputPlanner, tmp_path: Path
) -> None:
    spans = _caller_and_engine_spans(planner)
    engine_span = next(s for s in spans if s.name == "llm_request")
    attrs = engine_span.attributes or {}
    trace_file = tmp_path / "trace.pb"
    trace_file.write_bytes(encode_spans(spans).SerializeToString())

    result = CliRunner().invoke(
        app,
        [
            "check",
            str(trace_file),
            "--budget",
            str(BUDGET),
            "--format",
            "json",
            "--fail-on",
            "never",
        ],
    )
    assert result.exit_code == 0, result.output
    [verdict] = json.loads(result.stdout)
    prefill = next(stage for stage in verdict["stages"] if stage["name"] == "prefill")
    breakdown = prefill["breakdown"]
    queue_s = attrs["gen_ai.latency.time_in_queue"]
    prefill_s = attrs["gen_ai.latency.time_in_model_prefill"]
    assert isinstance(queue_s, float)
    assert isinstance(prefill_s, float)
    # The injected delays are inside the phases the span reports...
    assert queue_s >= 0.040
    assert prefill_s >= 0.030
    # ...and the evaluator turned exactly those phases into virtual children.
    assert abs(breakdown["vllm.queue"] - queue_s * 1e3) <= 0.02
    assert abs(breakdown["vllm.prefill"] - prefill_s * 1e3) <= 0.02
    # TTFT ends at the engine's first token: the engine's mark is the one that counts.
    ttft_ms = verdict["ttft_ms"]
    assert ttft_ms is not None
    assert ttft_ms >= (queue_s + prefill_s) * 1e3
