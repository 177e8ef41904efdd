"""A dead engine core is seen: open streams end, new requests fail, health says so."""

from __future__ import annotations

import asyncio
from typing import Literal

import httpx
import pytest
from spanbudget.service.engine.generation import OutputPlanner

from .harness import build_engine, preset, serve

STREAM = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "stream": True}


def fail_after_a_while(elapsed_seconds: float, step_seconds: float) -> float:
    """A stall source that breaks the step loop 0.3 s in (module level: the core process
    receives it by reference)."""
    if elapsed_seconds > 0.3:
        raise RuntimeError("the step loop broke")
    return 0.0


@pytest.mark.parametrize("core", ["thread", "process"])
def test_a_dead_core_ends_open_streams_fails_new_requests_and_turns_health_503(
    planner: OutputPlanner, core: Literal["thread", "process"]
) -> None:
    engine = build_engine(preset(), planner, core=core, stalls=fail_after_a_while)

    async def run() -> tuple[list[str], int, int, int]:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/health")).status_code == 200
            lines: list[str] = []

            async def read() -> None:
                async with client.stream("POST", "/v1/chat/completions", json=STREAM) as r:
                    async for line in r.aiter_lines():
                        lines.append(line)

            # The stream is cut mid-way, as a crashed engine's connection would be.
            with pytest.raises(httpx.RemoteProtocolError):
                await read()
            after = await client.post("/v1/chat/completions", json={**STREAM, "stream": False})
            health = (await client.get("/health")).status_code
            healthz = (await client.get("/healthz")).status_code
            return lines, after.status_code, health, healthz

    lines, after, health, healthz = asyncio.run(asyncio.wait_for(run(), 30))
    assert any('"content":"' in line for line in lines)  # it was streaming when the core died
    assert "data: [DONE]" not in lines
    assert (after, health, healthz) == (500, 503, 503)
