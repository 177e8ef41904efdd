"""`spanbudget collect` as a process: listens, SIGHUP reloads the budget (an invalid file
keeps the old one), SIGTERM judges what is buffered and leaves the store readable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from spanbudget.collector.intake.journal import Journal
from spanbudget.collector.sinks.store import VerdictStore

from tests.support.collector import BUDGET
from tests.support.otlp import to_request
from tests.support.servers import free_port, wait_until
from tests.support.traces import rag_trace

SPANBUDGET = Path(sys.executable).parent / "spanbudget"
PROTOBUF = "application/x-protobuf"


def _judged(client: httpx.Client, trace_id: str) -> dict:  # type: ignore[type-arg]
    body = to_request(rag_trace(trace_id=trace_id).spans).SerializeToString()
    assert client.post("/v1/traces", content=body, headers={"Content-Type": PROTOBUF}).is_success
    found: dict = {}  # type: ignore[type-arg]

    def ready() -> bool:
        response = client.get(f"/api/verdicts/{trace_id}")
        found.update(response.json() if response.status_code == 200 else {})
        return response.status_code == 200

    wait_until(ready, f"verdict {trace_id}")
    return found


@pytest.mark.slow
def test_collect_reloads_on_sighup_and_flushes_on_sigterm(tmp_path: Path) -> None:
    budget = tmp_path / "budget.yaml"
    original = BUDGET.read_text()
    budget.write_text(original)
    log_path = tmp_path / "collect.log"
    port = free_port()
    args = [
        str(SPANBUDGET),
        "collect",
        "--listen",
        f"127.0.0.1:{port}",
        *("--grpc-listen", "off"),  # not the shared default port
        "--budget",
        str(budget),
        "--db",
        str(tmp_path / "v.db"),
        "--alertmanager",
        "http://127.0.0.1:9",
        "--max-trace-age",
        "60s",
    ]
    with (
        log_path.open("w") as log,
        subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            # An option left out falls back to its SPANBUDGET_COLLECTOR_* variable.
            env={
                **os.environ,
                "HF_HUB_OFFLINE": "1",
                "SPANBUDGET_COLLECTOR_DECISION_WAIT_SECONDS": "0.2",
            },
        ) as process,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client,
    ):
        try:

            def up() -> bool:
                try:
                    return client.get("/healthz").status_code == 200
                except httpx.TransportError:
                    return False

            wait_until(up, "the collector to listen")
            assert f"listening on http://127.0.0.1:{port}" in log_path.read_text()
            assert "decision wait 0.2s, compiled evaluator" in log_path.read_text()
            assert _judged(client, "1" * 32)["budget"] == "rag-ttft"

            budget.write_text(original.replace("target_ms: 20", "target_ms: 90"))  # > limit
            process.send_signal(signal.SIGHUP)
            wait_until(lambda: "budget reload failed" in log_path.read_text(), "reload error")
            assert "keeping 'rag-ttft'" in log_path.read_text()
            assert _judged(client, "2" * 32)["budget"] == "rag-ttft"

            budget.write_text(original.replace("name: rag-ttft", "name: rag-ttft-v2"))
            process.send_signal(signal.SIGHUP)
            wait_until(lambda: "budget reloaded" in log_path.read_text(), "reload")
            assert _judged(client, "3" * 32)["budget"] == "rag-ttft-v2"

            # A trace whose root has not come is held (max age 60 s); SIGTERM leaves it to
            # the intake journal rather than judging it from its part.
            rootless = [replace(s, trace_id="4" * 32) for s in rag_trace().spans[1:]]
            rootless = [replace(rootless[0], parent_span_id="e" * 16), *rootless[1:]]
            body = to_request(rootless).SerializeToString()
            assert client.post(
                "/v1/traces", content=body, headers={"Content-Type": PROTOBUF}
            ).is_success
            time.sleep(0.5)
            assert client.get(f"/api/verdicts/{'4' * 32}").status_code == 404
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0
        finally:
            if process.poll() is None:
                process.kill()
    text = log_path.read_text()
    assert "collector stopped" in text
    assert "Traceback" not in text
    assert "1 trace(s) held without their root left unjudged" in text
    store = VerdictStore(tmp_path / "v.db", retention_seconds=86400, retention_count=100)
    try:
        assert store.get("4" * 32) is None  # not judged from a part ...
        assert {store.get(c * 32)["budget"] for c in "12"} == {"rag-ttft"}  # type: ignore[index]
    finally:
        store.close()
    journal = Journal(tmp_path / "v.intake")  # ... but kept for the next start
    try:
        assert len(list(journal.entries())) == 1
    finally:
        journal.close()
