"""`--engine-metrics`: the collector scrapes the engine emulator's own metrics page, and each
verdict carries the engine's state around its request's arrival and the prompt's tokens;
while the page fails, verdicts carry no engine state (not a stale one) and the failures
are counted and logged once."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi import FastAPI, Response
from prometheus_client import CollectorRegistry, generate_latest
from spanbudget.service.engine.metrics import EngineMetrics
from spanbudget.service.engine.scheduler import SchedulerStats

from tests.support.collector import running_collector, send_spans
from tests.support.servers import ServerThread, wait_until
from tests.support.traces import T0_NS, rag_trace


class Engine:
    """The emulator's metrics, in a state the test sets, served at /metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.metrics = EngineMetrics(self.registry, "qwen")
        self.failing = False
        self.app = FastAPI()
        self.app.get("/metrics")(self.page)

    def set(self, waiting: int, running: int, kv: float) -> None:
        self.metrics.on_idle(
            SchedulerStats(num_running=running, num_waiting=waiting, kv_cache_usage=kv)
        )

    def page(self) -> Response:
        if self.failing:
            return Response("engine restarting", status_code=503)
        return Response(generate_latest(self.registry), media_type="text/plain")


def trace_now(trace_id: str) -> list[object]:
    """The reference trace, moved to start now."""
    shift = time.time_ns() - T0_NS
    return [
        replace(s, start_ns=s.start_ns + shift, end_ns=s.end_ns + shift)
        for s in rag_trace(trace_id=trace_id).spans
    ]


def test_verdicts_carry_the_engine_state_at_arrival(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine()
    engine.set(waiting=14, running=8, kv=0.91)
    with (
        ServerThread(engine.app) as served,
        running_collector(
            tmp_path,
            engine_metrics=f"{served.url}/metrics",
            engine_metrics_every_seconds=0.1,
        ) as collector,
    ):
        scraper = collector.pipeline.engine_scraper
        assert scraper is not None
        wait_until(lambda: len(scraper.samples) >= 2, "two scrapes", 10)
        send_spans(collector, trace_now("a" * 32))
        attributes = collector.verdict("a" * 32)["attributes"]
        assert attributes["gen_ai.usage.input_tokens"] == 512
        assert attributes["engine.num_requests_waiting"] == 14
        assert attributes["engine.num_requests_running"] == 8
        assert attributes["engine.kv_cache_usage"] == 0.91
        assert 0 <= attributes["engine.scrape_age_ms"] <= 300
        page = collector.client.get(f"/traces/{'a' * 32}").text
        assert "<b>512-token prompt; 14 waiting, 8 running, KV cache 91%</b>" in page

        engine.failing = True
        with caplog.at_level(logging.WARNING, "spanbudget.collector.live.engine_metrics"):
            wait_until(
                lambda: collector.metric("spanbudget_engine_scrape_failures_total") >= 5,
                "five failed scrapes",
                10,
            )
            time.sleep(0.4)  # the last good scrape is now older than 3 intervals
            send_spans(collector, trace_now("b" * 32))
            attributes = collector.verdict("b" * 32)["attributes"]
        assert attributes["gen_ai.usage.input_tokens"] == 512  # from the spans, still
        assert not any(key.startswith("engine.") for key in attributes)
        said = [r for r in caplog.records if "unreadable" in r.getMessage()]
        assert len(said) == 1  # once per outage, not once per attempt
