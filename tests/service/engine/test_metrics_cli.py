"""Prometheus metrics under vLLM's names and buckets, and the `spanbudget engine` command."""

from __future__ import annotations

import asyncio
from typing import Literal

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from spanbudget.app.cli import app
from spanbudget.service.engine.api import create_app
from spanbudget.service.engine.generation import OutputPlanner
from spanbudget.service.engine.presets import preset_parameters
from spanbudget.service.engine.settings import EngineSettings
from typer.testing import CliRunner

from .harness import build_engine, preset, serve

REQUIRED = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
)


def test_metrics_use_vllm_names_labels_and_buckets(planner: OutputPlanner) -> None:
    engine = build_engine(preset(), planner)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}

    async def run() -> str:
        transport = httpx.ASGITransport(app=engine.app)
        async with (
            engine.runtime.running(),
            httpx.AsyncClient(transport=transport, base_url="http://engine") as client,
        ):
            for _ in range(3):
                (await client.post("/v1/chat/completions", json=body)).raise_for_status()
            return (await client.get("/metrics")).text

    families = {f.name: f for f in text_string_to_metric_families(asyncio.run(run()))}
    for name in REQUIRED:
        assert name in families, name

    def buckets(name: str) -> list[float]:
        family = families[name]
        return [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")]

    # vLLM's own bucket bounds (vllm/v1/metrics/buckets.py), written out: a wrong number in
    # metrics.py must fail here.
    assert buckets("vllm:time_to_first_token_seconds") == [
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, float("inf"),
    ]  # fmt: skip
    assert buckets("vllm:inter_token_latency_seconds") == [
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0, float("inf"),
    ]  # fmt: skip
    request_latency = [
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
        240.0, 480.0, 960.0, 1920.0, 7680.0, float("inf"),
    ]  # fmt: skip
    for name in ("e2e_request_latency", "request_queue_time", "request_prefill_time"):
        assert buckets(f"vllm:{name}_seconds") == request_latency, name
    ttft = families["vllm:time_to_first_token_seconds"]
    count = next(s for s in ttft.samples if s.name.endswith("_count"))
    assert count.value == 3
    assert count.labels == {"model_name": "Qwen/Qwen3-8B", "engine": "0"}
    itl = families["vllm:inter_token_latency_seconds"]
    assert next(s for s in itl.samples if s.name.endswith("_count")).value == 3 * 4
    success = families["vllm:request_success"]
    assert sum(s.value for s in success.samples if s.name.endswith("_total")) == 3


def test_engine_command_is_documented_and_rejects_bad_settings() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["engine", "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output
    assert "spanbudget engine" in result.output
    for name in preset_parameters():  # every preset parameter is a flag
        assert f"--{name.replace('_', '-')}" in result.output, name
    assert len(preset_parameters()) == 27
    result = runner.invoke(app, ["engine", "--preset", "nope"])
    assert result.exit_code == 2
    assert "unknown preset" in result.output
    result = runner.invoke(app, ["engine", "--mfu", "2"])
    assert result.exit_code == 2
    listed = runner.invoke(app, ["engine", "--list-presets"])
    assert listed.exit_code == 0
    assert "qwen3-8b-h100" in listed.output


def test_settings_read_environment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPANBUDGET_FAULTS", "1")
    monkeypatch.setenv("SPANBUDGET_ENGINE_PRESET", "qwen3-8b-a100")
    settings = EngineSettings(preset_overrides={"mfu": 0.3})
    assert settings.faults
    assert settings.resolved_preset().mfu == 0.3
    assert settings.served_model() == "Qwen/Qwen3-8B"
    assert settings.host_port() == ("127.0.0.1", 8000)
    assert EngineSettings(stalls=["5:100"]).stall_schedule()(5.0, 0.01) == pytest.approx(0.1)


def test_lifespan_stops_the_engine_core_then_runs_shutdown_hooks(planner: OutputPlanner) -> None:
    engine = build_engine(preset(), planner)
    calls: list[bool] = []
    app = create_app(
        engine.runtime, on_shutdown=(lambda: calls.append(engine.runtime.running_now),)
    )

    async def run() -> None:
        async with serve(app) as url, httpx.AsyncClient(base_url=url) as client:
            (await client.get("/health")).raise_for_status()
            assert engine.runtime.running_now

    asyncio.run(run())
    assert calls == [False]


@pytest.mark.parametrize("core", ["thread", "process"])
def test_load_gauges_fall_back_to_zero_when_the_only_request_is_abandoned(
    planner: OutputPlanner, core: Literal["thread", "process"]
) -> None:
    """An abort with nothing else running takes no step; the gauges must still see it."""
    engine = build_engine(preset(), planner, core=core)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000, "stream": True}
    gauges = ("vllm:num_requests_running", "vllm:kv_cache_usage_perc")

    async def run() -> tuple[dict[str, float], dict[str, float]]:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if '"content":"' in line:
                        await asyncio.sleep(0.2)  # some decode steps, then hang up
                        during = _samples(await client.get("/metrics"))
                        break
            deadline = asyncio.get_running_loop().time() + 2.0
            while True:
                after = _samples(await client.get("/metrics"))
                if (
                    not any(after[g] for g in gauges)
                    or asyncio.get_running_loop().time() > deadline
                ):
                    return during, after
                await asyncio.sleep(0.05)

    during, after = asyncio.run(run())
    assert during["vllm:num_requests_running"] == 1
    assert during["vllm:kv_cache_usage_perc"] > 0
    assert {g: after[g] for g in (*gauges, "vllm:num_requests_waiting")} == dict.fromkeys(
        (*gauges, "vllm:num_requests_waiting"), 0.0
    )


def _samples(response: httpx.Response) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name.startswith("vllm:num_requests") or sample.name == "vllm:kv_cache_usage_perc"
    }
