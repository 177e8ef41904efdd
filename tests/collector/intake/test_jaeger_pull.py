"""The pull from Jaeger (one view over many collectors) on a running collector: each
settled trace is judged once, as the intake would judge it; a trace still being written is
left for a later round; a trace this collector judged already is not offered again.
tests/deploy/test_scale_out.py runs it against a real Jaeger behind three collectors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from spanbudget.collector.intake.jaeger_pull import JaegerPull
from spanbudget.collector.spans import Span

from tests.support.collector import Collector, running_collector
from tests.support.traces import T0_NS, rag_trace

NOW_S = T0_NS / 1e9 + 60  # a minute after the traces' origin


def _pull(collector: Collector, found: list[Span], settle_s: float = 5.0) -> JaegerPull:
    def read(url: str, service: str, since_s: float, limit: int) -> Sequence[Span]:
        assert (url, service, since_s, limit) == ("http://jaeger", "rag-gateway", 300.0, 50)
        return found

    return JaegerPull(
        collector.pipeline.core,
        collector.pipeline.store,
        read,
        url="http://jaeger",
        service="rag-gateway",
        every_s=1.0,
        window_s=300.0,
        settle_s=settle_s,
        limit=50,
        memory=10,
        wall_clock=lambda: NOW_S,
    )


def test_each_settled_trace_is_judged_once_as_the_intake_judges_it(tmp_path: Path) -> None:
    slow = rag_trace(retrieval=60, trace_id="a" * 32).spans
    fast = rag_trace(trace_id="b" * 32).spans
    with running_collector(tmp_path) as collector:
        pull = _pull(collector, [*slow, *fast])
        assert pull.poll() == 2
        assert collector.verdict("a" * 32)["status"] == "overrun"
        assert collector.verdict("a" * 32)["blame"] == ["retrieval"]
        assert collector.verdict("b" * 32)["status"] == "ok"
        assert collector.verdict("b" * 32)["spans"] == len(fast)
        assert pull.poll() == 0  # seen: not offered again


def test_a_trace_still_being_written_waits_for_a_later_round(tmp_path: Path) -> None:
    recent = [
        replace(span, start_ns=span.start_ns + 58 * 10**9, end_ns=span.end_ns + 58 * 10**9)
        for span in rag_trace(trace_id="c" * 32).spans
    ]  # ended about 2 s before NOW_S, settle 5 s
    with running_collector(tmp_path) as collector:
        assert _pull(collector, recent).poll() == 0
        assert _pull(collector, recent, settle_s=1.0).poll() == 1
        assert collector.verdict("c" * 32)["status"] == "ok"


def test_a_trace_judged_here_already_is_not_offered_again(tmp_path: Path) -> None:
    spans = rag_trace(trace_id="d" * 32).spans
    with running_collector(tmp_path) as collector:
        assert _pull(collector, spans).poll() == 1
        collector.verdict("d" * 32)
        # A new pull (a restarted collector) finds the verdict in the store.
        assert _pull(collector, spans).poll() == 0
        assert collector.metric("spanbudget_spans_late_total") == 0
