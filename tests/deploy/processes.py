"""Start and stop real processes for the deployment tests, and feed the collector a trace."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.otlp import to_request
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[2]


def spanbudget_command(*args: str) -> list[str]:
    """`spanbudget ARGS` with the console script of the running interpreter's environment."""
    return [str(Path(sys.executable).with_name("spanbudget")), *args]


def start_process(command: list[str], health_url: str, log: Path) -> subprocess.Popen[bytes]:
    """Start COMMAND (output to LOG) and wait until HEALTH_URL answers 200."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OTEL_SDK_DISABLED": "true"}
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop_process(process)
            pytest.fail(f"{command} exited {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(health_url, timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    stop_process(process)
    pytest.fail(f"{command} never became healthy:\n{log.read_text()}")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def send_overrun_trace(collector: str, trace_id: str) -> None:
    """Send one trace whose retrieval stage overruns (TTFT 190 ms) and wait for its verdict."""
    body = to_request(rag_trace(retrieval=50, trace_id=trace_id).spans)
    response = httpx.post(
        f"{collector}/v1/traces",
        content=body.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    response.raise_for_status()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if httpx.get(f"{collector}/api/verdicts/{trace_id}", timeout=2).status_code == 200:
            return
        time.sleep(0.1)
    pytest.fail("the collector never decided the trace")
