"""Forwarding to a real OTLP/HTTP receiver on 127.0.0.1: annotations as DESIGN §7 says, and a
downstream that is down for a while loses nothing within the queue bound."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import pytest
from spanbudget.collector.annotations import (
    BUDGET_BLAME,
    BUDGET_NAME,
    BUDGET_OVERRUN_MS,
    BUDGET_STAGE,
    BUDGET_STATUS,
    BUDGET_TTFT_MS,
)
from spanbudget.collector.core.decisions import Decisions
from spanbudget.collector.sinks.forward import backoff_delay
from spanbudget.collector.spans import SpanKind

from tests.support.collector import Receiver, attributes_of, running_collector, send_spans
from tests.support.otlp import to_request
from tests.support.servers import ServerThread, free_port, wait_until
from tests.support.traces import TraceBuilder, rag_trace

PROTOBUF = "application/x-protobuf"


class Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.trace_ids: list[str] = []

    def consume(self, decisions: Decisions) -> None:
        self.trace_ids.extend(v.trace_id for v in decisions.verdicts())

    def close(self) -> None:
        return None


def test_forwarded_spans_carry_budget_annotations(tmp_path: Path) -> None:
    receiver = Receiver()
    recorder = Recorder()
    with (
        ServerThread(receiver.app) as downstream,
        running_collector(tmp_path, forward_url=downstream.url, sinks=[recorder]) as collector,
    ):
        judged = rag_trace(trace_id="1" * 32, retrieval=30, prefill=30)
        skipped = TraceBuilder(trace_id="2" * 32)
        skipped.add("GET /healthz", 0, 1, kind=SpanKind.SERVER, service="other")
        send_spans(collector, judged.spans + skipped.spans)
        verdict = collector.verdict("1" * 32)
        wait_until(
            lambda: receiver.count() == len(judged.spans) + 1,
            "the judged trace and the skipped span forwarded",
        )
        late = TraceBuilder(trace_id="1" * 32)
        late.add("late.cleanup", 500, 501, parent=judged.spans[1].span_id)
        send_spans(collector, [replace(late.spans[0], span_id="f" * 16)])
        wait_until(lambda: receiver.count() == len(judged.spans) + 2, "the late span forwarded")
        assert collector.verdict("1" * 32)["late_spans"] == 1
        assert collector.metric("spanbudget_spans_late_total") == 1
        assert collector.metric("spanbudget_traces_skipped_total") == 1
    assert recorder.trace_ids == ["1" * 32]  # late spans never re-deliver a verdict

    by_id = {key.hex(): (service, span) for key, (service, span) in receiver.spans.items()}
    root_attrs = attributes_of(by_id[judged.spans[0].span_id + "1" * 32][1])
    assert root_attrs[BUDGET_NAME] == "rag-ttft"
    assert root_attrs[BUDGET_STATUS] == verdict["status"] == "overrun"
    assert root_attrs[BUDGET_TTFT_MS] == verdict["ttft_ms"]
    assert root_attrs[BUDGET_BLAME] == verdict["blame"]
    assert sorted(verdict["blame"]) == ["prefill", "retrieval"]
    assert root_attrs[BUDGET_OVERRUN_MS] == verdict["overrun_ms"]
    assert root_attrs[BUDGET_STAGE] == "network"
    stages = {span.name: attributes_of(span).get(BUDGET_STAGE) for _, span in by_id.values()}
    assert stages["query rag-docs"] == "retrieval"
    assert stages["prompt.render"] == "prompt"
    assert stages["llm_request"] == "prefill"  # inherited from the chat client span
    assert stages["auth.verify"] == "gateway"
    assert stages["GET /healthz"] is None  # skipped trace: forwarded as it came
    assert stages["late.cleanup"] is None
    gateway = next(s for _, s in by_id.values() if s.name == "prompt.render")
    assert BUDGET_STATUS not in attributes_of(gateway)
    assert {service for service, _ in by_id.values()} == {
        "spanbudget-loadtest",
        "rag-gateway",
        "vllm",
        "other",
    }


def test_downstream_down_then_back_loses_nothing_and_never_slows_intake(tmp_path: Path) -> None:
    port = free_port()
    receiver = Receiver()
    traces = 30
    with running_collector(tmp_path, forward_url=f"http://127.0.0.1:{port}") as collector:
        for i in range(traces):
            send_spans(collector, rag_trace(trace_id=f"{i + 1:032x}").spans)
        for i in range(traces):
            collector.verdict(f"{i + 1:032x}")  # judged and stored while nothing can be sent
        wait_until(
            lambda: collector.metric("spanbudget_export_failures_total", sink="otlp") >= 2,
            "two failed exports",
        )
        assert receiver.count() == 0
        with ServerThread(receiver.app, port=port):
            expected = traces * len(rag_trace().spans)
            wait_until(lambda: receiver.count() == expected, "every span at the receiver")
            wait_until(
                lambda: collector.metric("spanbudget_spans_forwarded_total") == expected,
                "the forwarded count",
            )
    assert collector.metric("spanbudget_forward_spans_dropped_total", reason="queue_full") == 0
    assert collector.metric("spanbudget_spans_received_total") == expected


def test_spans_keep_their_otlp_originals_only_when_the_collector_forwards(
    tmp_path: Path,
) -> None:
    body = to_request(rag_trace().spans).SerializeToString()
    for forward_url, kept in ((None, False), ("http://127.0.0.1:9", True)):
        with running_collector(tmp_path / str(kept), forward_url=forward_url) as collector:
            batch = collector.pipeline.intake.decode(
                body, content_type=PROTOBUF, content_encoding=None
            )
        assert len(batch.spans) == len(rag_trace().spans)
        assert {held.proto is not None for held in batch.spans} == {kept}
        assert {held.origin is not None for held in batch.spans} == {kept}
        if kept:
            assert [h.proto.name for h in batch.spans] == [h.span.name for h in batch.spans]


def test_backoff_doubles_to_its_cap_and_never_overflows() -> None:
    delays = [backoff_delay(attempt, 0.5, 30.0) for attempt in range(8)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    # Past ~1,024 attempts 2**attempt no longer fits a float; an outage can last that long.
    assert backoff_delay(5_000, 0.5, 30.0) == 30.0
    assert backoff_delay(3, 0.5, 30.0, asked=45.0) == 45.0  # Retry-After wins when longer


def test_an_outage_under_traffic_retries_at_the_backoff_rate_and_logs_twice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """New batches arriving during an outage neither cut the backoff short (one attempt
    per batch, as before) nor get dropped below the queue's bound; the log says when the
    outage began and when delivery resumed, not every attempt."""
    port = free_port()
    receiver = Receiver()
    traces = 60
    caplog.set_level(logging.INFO, logger="spanbudget.collector.sinks.forward")
    with running_collector(
        tmp_path,
        forward_url=f"http://127.0.0.1:{port}",
        forward_backoff_seconds=0.05,
        forward_backoff_max_seconds=0.4,
        decision_wait_seconds=0.05,
    ) as collector:
        started = time.monotonic()
        for i in range(traces):  # about 2 s of traffic, each trace decided on its own
            send_spans(collector, rag_trace(trace_id=f"{i + 1:032x}").spans)
            time.sleep(0.035)
        collector.verdict(f"{traces:032x}")
        outage = time.monotonic() - started
        failures = collector.metric("spanbudget_export_failures_total", sink="otlp")
        # 0.05 + 0.1 + 0.2 + 0.4 + 0.4 ... (±20 %) over the outage: about outage / 0.4 + 4.
        assert 2 <= failures <= outage / 0.32 + 5, (failures, outage)
        assert receiver.count() == 0
        with ServerThread(receiver.app, port=port):
            expected = traces * len(rag_trace().spans)
            wait_until(lambda: receiver.count() == expected, "every span at the receiver")
    dropped = [
        collector.metric("spanbudget_forward_spans_dropped_total", reason=reason)
        for reason in ("queue_full", "rejected", "gave_up", "shutdown")
    ]
    assert dropped == [0, 0, 0, 0]
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("sinks.forward")]
    assert len(lines) == 2, lines
    assert "failing" in lines[0]
    assert "delivering again" in lines[1]


@pytest.mark.timing  # the outage lasts while the sends and the verdict wait run
def test_a_full_queue_drops_only_what_does_not_fit_and_counts_it(tmp_path: Path) -> None:
    """The queue's bound is where spans are dropped in an outage, counted as queue_full;
    what fitted is delivered when the downstream returns."""
    port = free_port()
    receiver = Receiver()
    per_trace = len(rag_trace().spans)
    with running_collector(
        tmp_path,
        forward_url=f"http://127.0.0.1:{port}",
        forward_queue_spans=10 * per_trace,
        forward_batch_spans=per_trace,
    ) as collector:
        for i in range(30):
            send_spans(collector, rag_trace(trace_id=f"{i + 1:032x}").spans)
        collector.verdict(f"{30:032x}")
        wait_until(
            lambda: (
                collector.metric("spanbudget_forward_spans_dropped_total", reason="queue_full") > 0
            ),
            "the queue at its bound",
        )

        def dropped() -> float:
            return collector.metric("spanbudget_forward_spans_dropped_total", reason="queue_full")

        with ServerThread(receiver.app, port=port):
            # The API may show the last verdict a moment before the forwarder took its
            # step: the drops are read again until every span is accounted for.
            wait_until(
                lambda: receiver.count() + dropped() == 30 * per_trace,
                "what was queued delivered",
            )
        # At most the queue and the batch in hand survive the outage.
        assert 10 * per_trace <= receiver.count() <= 11 * per_trace
