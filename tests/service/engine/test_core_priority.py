"""The step thread's CPU priority: real-time where the system allows it, never an error."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import httpx
import pytest
from spanbudget.service.engine.core_priority import request_core_priority
from spanbudget.service.engine.generation import OutputPlanner

from .harness import build_engine, preset, serve

_CAP_SYS_NICE = 23


def _may_go_realtime() -> bool:
    """Whether this process holds CAP_SYS_NICE (root normally does; a container may not)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> _CAP_SYS_NICE & 1)
    return False


def _on_a_thread(work: Callable[[], str]) -> tuple[str, int]:
    """Run `work` on a short-lived thread; its result and the policy the thread ended with."""
    out: list[tuple[str, int]] = []

    def run() -> None:
        out.append((work(), os.sched_getscheduler(0)))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def _policy_of_threads(pid: int) -> dict[int, int]:
    return {
        int(t.name): os.sched_getscheduler(int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()
    }


def test_normal_leaves_the_thread_alone() -> None:
    said, policy = _on_a_thread(lambda: request_core_priority("normal"))
    assert policy == os.SCHED_OTHER
    assert said == "normal priority (asked for)"


@pytest.mark.skipif(not _may_go_realtime(), reason="needs CAP_SYS_NICE to be granted SCHED_FIFO")
def test_realtime_gets_sched_fifo_for_the_calling_thread_only() -> None:
    said, policy = _on_a_thread(lambda: request_core_priority("realtime"))
    assert policy == os.SCHED_FIFO
    assert said == "SCHED_FIFO priority 1"
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller's other threads keep theirs


def test_a_refusal_is_reported_not_raised() -> None:
    def refuse(pid: int, policy: int, param: os.sched_param) -> None:
        raise PermissionError(1, "Operation not permitted")

    said, policy = _on_a_thread(lambda: request_core_priority("realtime", refuse))
    assert policy == os.SCHED_OTHER
    assert said.startswith("normal priority (SCHED_FIFO refused")
    assert "CAP_SYS_NICE" in said


@pytest.mark.parametrize("asked", ["realtime", "normal"])
def test_engine_core_process_runs_its_step_thread_at_the_priority_it_reports(
    planner: OutputPlanner, asked: Literal["realtime", "normal"]
) -> None:
    engine = build_engine(preset(), planner, core="process", core_priority=asked)

    async def run() -> dict[str, object]:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            # The core reports once its loop has started; a request makes sure it has.
            body = {"prompt": "hello", "max_tokens": 2}
            assert (await client.post("/v1/completions", json=body)).status_code == 200
            info: dict[str, object] = (await client.get("/emulator/core")).json()
            step_thread = info["step_thread_id"]
            assert isinstance(step_thread, int)
            # The core process's main thread is the step thread; its sender thread (and
            # every thread of this, the frontend, process) stays at normal priority.
            info["policies"] = _policy_of_threads(step_thread)
            info["frontend"] = set(_policy_of_threads(os.getpid()).values())
            return info

    info = asyncio.run(run())
    policies = info["policies"]
    assert isinstance(policies, dict)
    assert len(policies) >= 2
    step_policy = policies.pop(info["step_thread_id"])
    assert info["engine_core"] == "process"
    assert set(policies.values()) == {os.SCHED_OTHER}
    assert info["frontend"] == {os.SCHED_OTHER}
    if asked == "realtime" and _may_go_realtime():
        assert step_policy == os.SCHED_FIFO
        assert info["scheduling"] == "SCHED_FIFO priority 1"
    else:
        assert step_policy == os.SCHED_OTHER
        assert str(info["scheduling"]).startswith("normal priority")
