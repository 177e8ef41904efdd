"""Real-time behaviour: measured latencies against the model's predictions, under load.

Each test serves the emulator with uvicorn on 127.0.0.1 and measures as a client would.
Presets are chosen so that steps last tens of milliseconds, long enough to time reliably
on a shared 2-core machine; tolerances are the issue's.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable
from typing import Literal

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from spanbudget.service.engine.generation import OutputPlanner
from spanbudget.service.engine.perf_model import BatchEntry, PerfModel
from spanbudget.service.engine.simulation import Arrival, simulate
from spanbudget.service.tokens import TokenCounter

from .harness import StreamResult, bench_style_stream, build_engine, filler_text, preset, serve

pytestmark = pytest.mark.timing


def on_some_attempt(
    measure: Callable[[], list[tuple[float, float]]], rel: float, attempts: int = 3
) -> None:
    """Every (measured, predicted) pair within `rel`, and every check `measure` asserts,
    on at least one of `attempts` runs.

    The machine is shared: a run that another process disturbed is measured again. A
    wrong model fails every attempt.
    """
    seen: list[object] = []
    for _ in range(attempts):
        try:
            pairs = measure()
        except AssertionError as failed:  # a timing shape, e.g. "the last waited longest"
            seen.append(f"AssertionError: {failed}")
            continue
        if all(m == pytest.approx(p, rel=rel) for m, p in pairs):
            return
        seen.append(pairs)
    pytest.fail(f"never within {rel:.0%} of the model in {attempts} runs: {seen}")


def _chat(text: str, max_tokens: int) -> dict[str, object]:
    return {
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "max_tokens": max_tokens,
        "stream_options": {"include_usage": True},
    }


@pytest.mark.parametrize(
    ("base", "words", "core"),
    [("qwen3-8b-a100", 2000, "thread"), ("qwen3-8b-l4", 500, "process")],
    ids=["a100-2k-thread", "l4-500-process"],
)
def test_lone_request_ttft_matches_predicted_prefill(
    planner: OutputPlanner, base: str, words: int, core: Literal["thread", "process"]
) -> None:
    engine = build_engine(preset(base), planner, core=core)

    async def run() -> StreamResult:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            await bench_style_stream(client, "/v1/chat/completions", _chat("warm up", 2))
            return await bench_style_stream(
                client, "/v1/chat/completions", _chat(filler_text(words), 4)
            )

    def measure() -> list[tuple[float, float]]:
        result = asyncio.run(run())
        assert result.usage is not None
        predicted = engine.runtime.perf.prefill_seconds(result.usage["prompt_tokens"])
        return [(result.ttft, predicted)]

    on_some_attempt(measure, rel=0.10)


def test_concurrent_long_prompts_queue_behind_each_other(tokenizer: TokenCounter) -> None:
    planner = OutputPlanner(tokenizer, seed=1, min_tokens=8, max_tokens=8)
    p = preset("qwen3-8b-h100", max_num_batched_tokens=2048)
    engine = build_engine(p, planner, core="process")
    prompt = filler_text(1990)

    async def run() -> list[StreamResult]:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            await bench_style_stream(client, "/v1/chat/completions", _chat("warm up", 2))
            return await asyncio.gather(
                *(
                    bench_style_stream(client, "/v1/chat/completions", _chat(f"{i} {prompt}", 8))
                    for i in range(8)
                )
            )

    def measure() -> list[tuple[float, float]]:
        results = asyncio.run(run())
        assert all(r.usage is not None for r in results)
        prompt_tokens = results[0].usage["prompt_tokens"] if results[0].usage else 0
        assert 1990 <= prompt_tokens <= 2100
        predicted = simulate(p, [Arrival(0.0, prompt_tokens, 8)] * 8).timings()
        ttfts = sorted(r.ttft for r in results)
        assert ttfts[-1] > 6 * ttfts[0]
        # The last one waited for every chunk scheduled before it: eight prefills, counted
        # here from the roofline alone as well as by the scheduler's own simulation.
        eight_prefills = 8 * PerfModel(p).prefill_seconds(prompt_tokens)
        return [
            (ttfts[-1], predicted[-1].time_to_first_token),
            (ttfts[-1], eight_prefills),
        ]

    on_some_attempt(measure, rel=0.15)


def test_inter_token_latency_grows_with_batch_size(tokenizer: TokenCounter) -> None:
    # A small model on slow memory: decode is memory-bound and the KV cache read by a big
    # batch costs more than the weights, so the model predicts a clear rise.
    p = preset("qwen3-8b-h100", params_b=0.5, hbm_bandwidth_gbs=100.0)
    planner = OutputPlanner(tokenizer, seed=2, min_tokens=40, max_tokens=40)
    engine = build_engine(p, planner, core="process")
    prompt = filler_text(300)

    async def run(n: int) -> list[StreamResult]:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            return await asyncio.gather(
                *(
                    bench_style_stream(client, "/v1/chat/completions", _chat(f"{i} {prompt}", 24))
                    for i in range(n)
                )
            )

    perf = PerfModel(p)
    model_alone = perf.step_seconds([BatchEntry(1, 320)])
    model_crowd = perf.step_seconds([BatchEntry(1, 320)] * 32)
    assert model_crowd > 1.8 * model_alone

    def measure() -> list[tuple[float, float]]:
        alone = asyncio.run(run(1))
        crowd = asyncio.run(run(32))
        itl_alone = statistics.median(alone[0].itl)
        itl_crowd = statistics.median(x for r in crowd for x in r.itl)
        assert itl_crowd > 1.6 * itl_alone
        return [(itl_alone, model_alone), (itl_crowd, model_crowd)]

    on_some_attempt(measure, rel=0.15)


def test_full_kv_cache_preempts_and_the_preempted_request_completes(
    tokenizer: TokenCounter,
) -> None:
    planner = OutputPlanner(tokenizer, seed=3, min_tokens=200, max_tokens=200)
    # 40 blocks of 16 tokens: two requests of 100 + 150 tokens fit, four do not.
    p = preset("qwen3-8b-h100", num_gpu_blocks=40, hbm_bandwidth_gbs=33500.0)
    engine = build_engine(p, planner, core="process")
    payload = {"prompt": list(range(1000, 1100)), "max_tokens": 150, "stream": True}

    async def run() -> tuple[list[StreamResult], str]:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            results = await asyncio.gather(
                *(bench_style_stream(client, "/v1/completions", payload) for _ in range(4))
            )
            return results, (await client.get("/metrics")).text

    results, metrics = asyncio.run(run())
    preempted = set(engine.runtime.loop.stats.recent_preemptions)
    assert preempted, "the KV cache never filled"
    for result in results:
        assert result.done
        assert result.deltas == 150
        assert result.finish_reason == "length"
    assert preempted <= {r.request_id for r in results}
    # Preemption recomputes: the same prompt and seed still give the same text.
    assert len({r.text for r in results}) == 1
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
    }
    assert samples["vllm:num_preemptions_total"] == engine.runtime.loop.stats.num_preemptions
