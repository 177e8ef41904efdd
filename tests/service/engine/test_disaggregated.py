"""The disaggregated engine: prefill and decode instances, the KV cache moved over a link."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spanbudget.service.engine.perf_model import BatchEntry, PerfModel
from spanbudget.service.engine.presets import Preset, get_preset
from spanbudget.service.engine.scheduler import RequestTimings
from spanbudget.service.engine.simulation import Arrival, simulate
from spanbudget.service.engine.tracing import (
    PHASE_SPANS,
    RequestSpanInfo,
    RequestTracer,
    phase_spans,
)

PRESET = get_preset("qwen3-8b-h200").with_overrides({"disaggregated": True})


def test_the_first_token_waits_for_the_kv_cache_to_cross_the_link() -> None:
    prompt = 1500
    run = simulate(
        PRESET, [Arrival(0.0, prompt, 20), Arrival(5.0, prompt, 20, kv_transfer_delay=0.04)]
    )
    fast, slow = run.sequences
    bytes_moved = prompt * 2 * 36 * 8 * 128 * 2  # every layer's keys and values, bf16
    transfer = 0.5e-3 + bytes_moved / 50e9
    assert fast.first_token_ts - fast.prefilled_ts == pytest.approx(transfer)
    assert slow.first_token_ts - slow.prefilled_ts == pytest.approx(transfer + 0.04)
    # The prefill instance's prefill is the phase attribute; the move is in TTFT only.
    timings = RequestTimings.of(slow, disaggregated=True)
    assert timings.time_in_model_prefill == pytest.approx(slow.prefilled_ts - slow.scheduled_ts)
    assert timings.time_to_first_token == pytest.approx(
        timings.time_in_queue + timings.time_in_model_prefill + transfer + 0.04
    )


def test_a_step_lasts_as_long_as_the_slower_instance() -> None:
    # One sequence decoding when an 8,000-token prompt arrives: the step that prefills it
    # also decodes the other. Disaggregated, the decode runs on the other GPU beside it.
    arrivals = [Arrival(0.0, 200, 400), Arrival(0.5, 8000, 2)]
    prefill_alone = PerfModel(PRESET).step_seconds([BatchEntry(8000, 0)])

    def mixed_step(preset: Preset) -> float:
        steps = simulate(preset, arrivals).steps
        return next(s.seconds for s in steps if {n for _, n in s.entries} == {1, 8000})

    assert mixed_step(PRESET) == pytest.approx(prefill_alone)
    assert mixed_step(get_preset("qwen3-8b-h200")) > prefill_alone


def test_the_request_span_gets_vllms_phase_spans_as_children() -> None:
    run = simulate(PRESET, [Arrival(0.0, 1000, 5, kv_transfer_delay=0.03)])
    seq = run.sequences[0]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    info = RequestSpanInfo("req-1", None, arrival_time_ns=10**18)
    RequestTracer(provider).emit(info, RequestTimings.of(seq, disaggregated=True), phase_spans(seq))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"llm_request", *PHASE_SPANS} - {"vllm_queue"}  # no time queued
    parent = spans["llm_request"].context.span_id
    kv = spans["vllm_async_kv_transfer"]
    for name in PHASE_SPANS[1:]:
        assert spans[name].parent is not None
        assert spans[name].parent.span_id == parent
    assert kv.start_time == spans["vllm_prefill"].end_time
    assert kv.end_time == spans["vllm_decode"].start_time
    assert (kv.end_time - kv.start_time) / 1e9 == pytest.approx(
        0.03 + 0.5e-3 + 1000 * 147456 / 50e9, abs=1e-6
    )
