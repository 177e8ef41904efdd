"""A flood beyond the intake queue is answered 503 + Retry-After, before its bodies are
decoded; nothing crashes, accepted plus refused requests reconcile exactly with what was
sent, and /healthz answers while large bodies are being decoded."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from spanbudget.collector.core.decisions import Decisions
from spanbudget.collector.live.app import app_for

from tests.support.collector import idle_pipeline, running_collector
from tests.support.otlp import to_request
from tests.support.traces import rag_trace

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
SENDERS = 4
REQUESTS_EACH = 25


class GateSink:
    """A verdict sink that holds the worker until released: a stalled pipeline."""

    name = "gate"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.seen: list[str] = []

    def consume(self, decisions: Decisions) -> None:
        self.entered.set()
        self.release.wait(30)
        self.seen.extend(v.trace_id for v in decisions.verdicts())

    def close(self) -> None:
        return None


def test_flood_beyond_the_queue_gets_503_and_reconciles_exactly(tmp_path: Path) -> None:
    gate = GateSink()
    span_count = len(rag_trace().spans)
    # Retry-After: 0, as the senders do not wait: a sender back sooner than told is held
    # until its wait is over (tests/collector/intake/test_refusals.py), here never.
    with running_collector(
        tmp_path, sinks=[gate], intake_queue_spans=10 * span_count, retry_after_seconds=0
    ) as c:
        assert (
            c.post(
                to_request(rag_trace(trace_id="0" * 31 + "1").spans).SerializeToString(), PROTOBUF
            ).status_code
            == 200
        )
        assert gate.entered.wait(10), "the worker never reached the listener"

        def send(sender: int) -> list[tuple[str, int, str | None]]:
            out = []
            with httpx.Client(base_url=c.url, timeout=10) as client:
                for i in range(REQUESTS_EACH):
                    trace_id = f"{sender + 1:04x}{i + 1:028x}"
                    body = to_request(rag_trace(trace_id=trace_id).spans).SerializeToString()
                    r = client.post("/v1/traces", content=body, headers={"Content-Type": PROTOBUF})
                    out.append((trace_id, r.status_code, r.headers.get("retry-after")))
            return out

        with ThreadPoolExecutor(SENDERS) as pool:
            results = [row for rows in pool.map(send, range(SENDERS)) for row in rows]
        assert c.client.get("/healthz").status_code == 200
        gate.release.set()

        accepted = [t for t, code, _ in results if code == 200]
        rejected = [(t, retry) for t, code, retry in results if code == 503]
        assert len(accepted) + len(rejected) == len(results) == SENDERS * REQUESTS_EACH
        assert len(accepted) == 10  # exactly the queue bound, while the worker is stalled
        assert all(retry == "0" for _, retry in rejected)
        # A request is refused before its body is decoded (admission first), so the
        # refusals reconcile by request; the spans received, exactly.
        refused = c.metric("spanbudget_requests_rejected_total", reason="queue_full")
        assert refused == len(rejected)
        assert c.metric("spanbudget_spans_received_total") == (len(accepted) + 1) * span_count
        # Every accepted trace is judged once the worker moves again; no rejected one is.
        for trace_id in accepted:
            assert c.verdict(trace_id)["status"] == "ok"
        for trace_id, _ in rejected[:5]:
            assert c.client.get(f"/api/verdicts/{trace_id}").status_code == 404
    assert sorted(gate.seen) == sorted(["0" * 31 + "1", *accepted])


def test_traces_that_never_complete_stay_bounded_and_evictions_are_counted(
    tmp_path: Path,
) -> None:
    spans = []
    for n in range(200):  # rootless: each waits for max_age, which never comes in this test
        spans += rag_trace(trace_id=f"{n + 1:032x}").spans[1:]
    with running_collector(tmp_path, max_traces=50, max_trace_age_seconds=600) as c:
        for start in range(0, len(spans), 500):
            body = to_request(spans[start : start + 500]).SerializeToString()
            assert c.post(body, PROTOBUF).status_code == 200
        deadline = time.monotonic() + 10
        while c.metric("spanbudget_traces_dropped_total", reason="buffer_full") < 150:
            assert time.monotonic() < deadline, "evictions not counted"
            time.sleep(0.05)
        assert c.metric("spanbudget_buffered_traces") == 50
        assert c.metric("spanbudget_spans_received_total") == len(spans)
        assert c.client.get("/readyz").status_code == 200


def test_requests_without_spans_never_pile_up_in_the_intake_queue(tmp_path: Path) -> None:
    # The bound counts spans; a flood of span-less requests must not grow the queue either.
    pipeline = idle_pipeline(tmp_path)  # not started: nothing drains the queue
    empty = to_request([]).SerializeToString() + b"\n\x00"  # one empty ResourceSpans
    with TestClient(app_for(pipeline)) as client:
        for body, content_type in ((empty, PROTOBUF), (b'{"resourceSpans": []}', JSON)):
            for _ in range(200):
                response = client.post(
                    "/v1/traces", content=body, headers={"Content-Type": content_type}
                )
                assert response.status_code == 200
        assert pipeline.core.wait_idle(0.2)  # nothing queued
        full = to_request(rag_trace().spans).SerializeToString()
        response = client.post("/v1/traces", content=full, headers={"Content-Type": PROTOBUF})
        assert response.status_code == 200
        assert not pipeline.core.wait_idle(0.2)  # a real request is queued, as it should be
    pipeline.store.close()


def test_a_request_that_can_never_fit_is_413_not_503(tmp_path: Path) -> None:
    """Retrying cannot help a batch larger than the whole queue: say so, do not say busy."""
    big = [s for i in range(3) for s in rag_trace(trace_id=f"{i + 1:032x}").spans]  # 33 spans
    small = rag_trace(trace_id=f"{99:032x}").spans
    with running_collector(tmp_path, intake_queue_spans=20) as collector:
        refused = collector.post(to_request(big).SerializeToString(), "application/x-protobuf")
        assert refused.status_code == 413
        assert "Retry-After" not in refused.headers
        assert collector.metric("spanbudget_spans_rejected_total", reason="too_many_spans") == 33
        accepted = collector.post(to_request(small).SerializeToString(), "application/x-protobuf")
        assert accepted.status_code == 200
        assert collector.verdict(f"{99:032x}")["status"] == "ok"
