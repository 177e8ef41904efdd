"""While a run sends, the cycle collector runs only when the dispatcher calls it and leaves
what existed before the run alone, and other threads hand the interpreter lock over
quickly; afterwards every setting is as it was."""

from __future__ import annotations

import asyncio
import gc
import sys

from opentelemetry.sdk.trace import TracerProvider
from spanbudget.collector.loadtest.client import ChatRequest, RequestRecord
from spanbudget.collector.loadtest.runner import SWITCH_INTERVAL_S, RunSettings, run_requests

from tests.support.sse_server import Stall, serve, sse_app


def test_settings_hold_during_a_run_and_are_restored() -> None:
    thresholds = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    interval = sys.getswitchinterval()
    assert interval != SWITCH_INTERVAL_S
    seen: list[tuple[bool, int, float]] = []

    def on_record(_: RequestRecord) -> None:
        seen.append((gc.isenabled(), gc.get_freeze_count(), sys.getswitchinterval()))

    requests = [ChatRequest(i, "p", i * 0.01, "hi", 2) for i in range(3)]
    with serve(sse_app(Stall())) as base:
        settings = RunSettings(f"{base}/v1/chat/completions", "m", "run-steady")
        records = asyncio.run(
            run_requests(requests, settings, TracerProvider().get_tracer("t"), on_record=on_record)
        )
    assert all(r.ok for r in records)
    assert len(seen) == 3
    for enabled, frozen, switch_interval in seen:
        assert not enabled
        assert frozen > 0
        assert switch_interval == SWITCH_INTERVAL_S
    assert gc.isenabled()
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == frozen_before
    assert sys.getswitchinterval() == interval
