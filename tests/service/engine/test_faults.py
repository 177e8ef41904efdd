"""Injected faults: the delay header (only with --faults), stalls, 500s and dropped streams."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import MutableMapping
from typing import Any, Literal

import httpx
import pytest
from spanbudget.service.engine.faults import (
    FaultError,
    StallSchedule,
    TroubleMaker,
    engine_delays,
    parse_stall,
)
from spanbudget.service.engine.generation import OutputPlanner

from tests.asgi import post_scope

from .harness import build_engine, preset, serve

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
DELAY = {"x-spanbudget-delay": "retrieval=30,queue=50,prefill=40"}


def test_delay_header_parsing_keeps_engine_keys_only() -> None:
    assert engine_delays("retrieval=30,queue=50, prefill=40") == {"queue": 0.05, "prefill": 0.04}
    assert engine_delays("queue=abc,prefill,=3") == {}
    assert engine_delays(None) == {}
    # Capped as the gateway caps it: a typo must not park a request for minutes.
    assert engine_delays("queue=999999") == {"queue": 10.0}


@pytest.mark.parametrize("core", ["thread", "process"])
@pytest.mark.parametrize("faults", [True, False], ids=["faults-on", "faults-off"])
def test_delay_header_lengthens_queue_and_prefill_only_with_faults(
    planner: OutputPlanner, faults: bool, core: Literal["thread", "process"]
) -> None:
    # The process core gets the delays through the pipe, as `spanbudget engine` runs it.
    engine = build_engine(preset("qwen3-8b-h100"), planner, faults=faults, core=core)

    async def run() -> None:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            response = await client.post("/v1/chat/completions", json=CHAT, headers=DELAY)
            response.raise_for_status()

    asyncio.run(run())
    (span,) = engine.spans.get_finished_spans()
    attrs = span.attributes or {}
    queue = attrs["gen_ai.latency.time_in_queue"]
    prefill = attrs["gen_ai.latency.time_in_model_prefill"]
    assert isinstance(queue, float)
    assert isinstance(prefill, float)
    modelled = engine.runtime.perf.prefill_seconds(int(attrs["gen_ai.usage.prompt_tokens"]))
    # 20 ms of slack: a shared machine can delay a step that much, far less than the 40-50 ms
    # that the header adds.
    if faults:
        assert queue == pytest.approx(0.05, abs=0.02)
        assert prefill == pytest.approx(0.04 + modelled, abs=0.02)
    else:
        assert queue < 0.02
        assert prefill == pytest.approx(modelled, abs=0.02)


def test_error_rate_answers_500(planner: OutputPlanner) -> None:
    engine = build_engine(preset(), planner, trouble=TroubleMaker(error_rate=1.0))

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=engine.app)
        async with (
            engine.runtime.running(),
            httpx.AsyncClient(transport=transport, base_url="http://engine") as client,
        ):
            return await client.post("/v1/chat/completions", json=CHAT)

    response = asyncio.run(run())
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "InternalServerError"
    assert engine.spans.get_finished_spans() == ()


def test_drop_rate_cuts_the_stream_mid_way(planner: OutputPlanner) -> None:
    # Seed 0 cuts after 3 of the 20 tokens: the engine is 17 steps from done when the stream
    # is cut. (Seed 4 cut after 18: on a loaded machine the writer fell two tokens behind,
    # the engine finished first and rightly emitted its span.)
    engine = build_engine(preset(), planner, trouble=TroubleMaker(drop_rate=1.0, seed=0))
    body = CHAT | {"stream": True, "max_tokens": 20}
    received: list[str] = []

    async def run() -> None:
        async with (
            serve(engine.app) as url,
            httpx.AsyncClient(base_url=url) as client,
            client.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            async for line in response.aiter_lines():
                received.append(line)

    with pytest.raises(httpx.RemoteProtocolError):
        asyncio.run(run())
    data = [line for line in received if line.startswith("data: ")]
    assert len(data) == 1 + 3  # the role chunk, then the three tokens the fault lets out
    assert "data: [DONE]" not in data
    # The aborted request leaves nothing behind in the engine, and vLLM emits no span for it.
    assert not engine.runtime.scheduler.has_work
    assert engine.runtime.scheduler.free_blocks == engine.runtime.scheduler.total_blocks
    assert engine.spans.get_finished_spans() == ()


def test_stall_spec_parses_and_rejects_nonsense() -> None:
    assert parse_stall("10s:500ms") == (10.0, 0.5)
    assert parse_stall("2:40") == (2.0, 0.04)
    for spec in ("soon", "10", "-1:50", "3:0", "x:50", "10:inf", "nan:5"):
        with pytest.raises(FaultError):
            parse_stall(spec)


@pytest.mark.parametrize(
    ("start", "step", "stall"),
    [
        (0.0, 0.1, 0.0),  # wholly before the window
        (0.95, 0.1, 0.3),  # under way at AT: the whole window is added
        (1.1, 0.1, 0.2),  # due inside the window: waits for its end (1.3)
        (1.0, 0.1, 0.3),  # due exactly at AT
        (1.3, 0.1, 0.0),  # due as the window ends
        (5.0, 0.1, 0.0),  # the window passed while the engine was idle
    ],
)
def test_a_stall_window_delays_the_steps_it_meets(start: float, step: float, stall: float) -> None:
    stalls = StallSchedule([(1.0, 0.3)])
    assert stalls(start, step) == pytest.approx(stall)
    assert stalls(start + step + stall, step) == 0.0  # one window, spent once


def test_stall_windows_a_step_meets_one_after_another_add_up() -> None:
    stalls = StallSchedule([(1.12, 0.1), (1.0, 0.1), (3.0, 0.1)])
    # 0.95-1.05, held by the window at 1.0 until 1.15, which meets the window at 1.12.
    assert stalls(0.95, 0.1) == pytest.approx(0.2)
    assert stalls(2.95, 0.1) == pytest.approx(0.1)
    assert stalls(4.0, 0.1) == 0.0


@pytest.mark.timing  # the window opens at a time: a late step sees less of it
def test_scheduled_stall_holds_the_step_under_way(
    planner: OutputPlanner,
) -> None:
    # The window opens while a request is decoding: one step takes 0.3 s longer.
    engine = build_engine(preset(), planner, stalls=StallSchedule([(0.4, 0.3)]))
    body = {**CHAT, "max_tokens": 150}

    async def run() -> None:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            (await client.post("/v1/chat/completions", json=body)).raise_for_status()

    asyncio.run(run())
    records = engine.runtime.loop.records()
    stalled = [r for r in records if r.stall_seconds > 0]
    assert len(stalled) == 1
    # All of the window if the step was under way at AT; if it was due just after AT, the
    # rest of the window (less than one ~8 ms decode step short of it).
    assert 0.3 - 0.01 <= stalled[0].stall_seconds <= 0.3 + 1e-9
    assert stalled[0].actual_seconds >= stalled[0].stall_seconds
    (span,) = engine.spans.get_finished_spans()
    attrs = span.attributes or {}
    assert attrs["gen_ai.latency.e2e"] >= sum(r.actual_seconds for r in records) * 0.95


@pytest.mark.parametrize("core", ["thread", "process"])
def test_client_gone_mid_stream_frees_the_request_and_others_go_on(
    planner: OutputPlanner, core: Literal["thread", "process"]
) -> None:
    engine = build_engine(preset(), planner, core=core)
    # Long enough (about 3 s of decode) that a request the hang-up failed to abort would
    # still be running, and leave a span, whatever delays a loaded machine adds.
    body = CHAT | {"stream": True, "max_tokens": 400}

    async def run() -> int:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            for _ in range(12):
                async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    async for line in response.aiter_lines():
                        if '"content":"' in line and '"role"' not in line:
                            break  # hang up after the first token
            response = await client.post("/v1/chat/completions", json=CHAT)
            response.raise_for_status()
            await asyncio.sleep(0.1)
            return int(response.json()["usage"]["completion_tokens"])

    # Back-to-back requests arriving just after a step ends must never wait forever.
    assert asyncio.run(asyncio.wait_for(run(), 20)) == 4
    deadline = time.monotonic() + 1.0
    while engine.runtime.loop.stats.num_running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert engine.runtime.loop.stats.num_running == 0
    # Only the request that ran to the end has a span, as in vLLM.
    assert len(engine.spans.get_finished_spans()) == 1


def test_client_gone_before_the_first_chunk_still_aborts_the_request(
    planner: OutputPlanner,
) -> None:
    """The client left before Starlette asked the body for its first chunk, so the body never
    ran: the request must still be aborted, not generated to the end for nobody."""
    engine = build_engine(preset(), planner)
    body = json.dumps(CHAT | {"stream": True, "max_tokens": 50}).encode()
    incoming: list[dict[str, Any]] = [{"type": "http.request", "body": body}]
    scope = post_scope("/v1/chat/completions", "engine")

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        # A server may wait here (a paused write flow): cancellation lands before the body.
        await asyncio.sleep(0.05)

    async def run() -> int:
        async with engine.runtime.running():
            await engine.app(scope, receive, send)
            # Long enough for the 50 tokens to be generated (~0.4 s modelled) had nobody
            # aborted the request: a finished request would leave a span behind.
            await asyncio.sleep(1.5)
            stats = engine.runtime.loop.stats
            return stats.num_running + stats.num_waiting

    assert asyncio.run(run()) == 0
    # An aborted request has no span, as in vLLM.
    assert engine.spans.get_finished_spans() == ()
