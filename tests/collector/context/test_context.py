"""Why a stage overran: the prompt's tokens from the spans, the engine's state from its
real metrics page (the emulator's own `vllm:*` gauges), joined at the request's arrival,
and the line that says it."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from spanbudget.collector.context import (
    EngineSamples,
    arrival_ns,
    parse_engine_metrics,
    why,
)
from spanbudget.service.engine.metrics import EngineMetrics
from spanbudget.service.engine.scheduler import SchedulerStats

from tests.support.traces import T0_NS, rag_trace


def engine_page(waiting: int, running: int, kv: float) -> str:
    """The emulator's /metrics in this state."""
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry, "qwen")
    metrics.on_idle(SchedulerStats(num_running=running, num_waiting=waiting, kv_cache_usage=kv))
    return generate_latest(registry).decode()


# Two engines behind one API server (vLLM's data parallel): one family, two label sets.
TWO_ENGINES = """# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen"} 3.0
vllm:num_requests_waiting{engine="1",model_name="qwen"} 4.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage (V0's name).
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="qwen"} 0.5
"""


def test_the_engine_page_gives_its_state_summed_over_engines() -> None:
    assert parse_engine_metrics(engine_page(14, 8, 0.91)) == {
        "engine.num_requests_waiting": 14.0,
        "engine.num_requests_running": 8.0,
        "engine.kv_cache_usage": 0.91,
    }
    assert parse_engine_metrics(TWO_ENGINES) == {
        "engine.num_requests_waiting": 7.0,
        "engine.kv_cache_usage": 0.5,
    }
    assert parse_engine_metrics("# HELP other x\n# TYPE other gauge\nother 1\n") == {}
    with pytest.raises(ValueError, match="could not convert"):
        parse_engine_metrics("not { a metrics page\n")


def test_the_state_at_arrival_is_the_newest_scrape_before_it_and_not_stale() -> None:
    samples = EngineSamples(keep=3, max_age_ns=3_000)
    assert samples.at(10) is None
    for t, waiting in ((1_000, 1.0), (2_000, 2.0), (3_000, 3.0)):
        samples.add(t, {"engine.num_requests_waiting": waiting})
    assert samples.at(999) is None  # before the first scrape
    assert samples.at(2_500) == ({"engine.num_requests_waiting": 2.0}, 500)
    assert samples.at(3_000) == ({"engine.num_requests_waiting": 3.0}, 0)
    assert samples.at(6_001) is None  # the last scrape is older than max_age: an outage
    samples.add(2_999, {"engine.num_requests_waiting": 9.0})  # the clock stepped back
    assert samples.at(3_000) == ({"engine.num_requests_waiting": 3.0}, 0)
    for t in range(4_000, 20_000, 1_000):
        samples.add(t, {})
    assert len(samples) <= 2 * samples.keep  # bounded


def test_arrival_is_the_engine_spans_start_else_the_traces() -> None:
    spans = rag_trace().spans
    engine = next(s for s in spans if s.name == "llm_request")
    assert arrival_ns(spans) == engine.start_ns
    app = [s for s in spans if s.name != "llm_request"]
    assert arrival_ns(app) == T0_NS
    assert arrival_ns([]) is None


def test_why_reads_the_prompt_and_the_engine() -> None:
    assert (
        why(
            {
                "gen_ai.usage.input_tokens": 3100,
                "engine.num_requests_waiting": 14,
                "engine.num_requests_running": 8,
                "engine.kv_cache_usage": 0.914,
            }
        )
        == "3,100-token prompt; 14 waiting, 8 running, KV cache 91%"
    )
    assert why({"gen_ai.usage.input_tokens": 40}) == "40-token prompt"
    assert why({"loadtest.run_id": "r"}) == ""
