"""Budget-aware forwarding, through a real collector to a real OTLP/HTTP receiver: the
traces whose verdict status is kept, plus the share of the rest that OpenTelemetry's own
`TraceIdRatioBased` sampler picks, arrive annotated; replicas and restarts agree; late
spans follow their trace; `/metrics` counts what arrived; bad flags exit 2."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased
from spanbudget.app.cli import app
from spanbudget.collector.annotations import BUDGET_BLAME, BUDGET_STATUS
from spanbudget.collector.live.settings import CollectorSettings
from spanbudget.collector.sinks.forward_policy import sample_bound, sampled
from typer.testing import CliRunner

from tests.support.collector import (
    Collector,
    Receiver,
    attributes_of,
    running_collector,
    send_spans,
)
from tests.support.servers import ServerThread, wait_until
from tests.support.traces import TraceBuilder, rag_trace

# What each status takes, in the reference trace's shape (budget.yaml's numbers).
SHAPES: dict[str, dict[str, Any]] = {
    "ok": {},
    "warn": {"retrieval": 10},  # retrieval 28 ms: over its target, within its limit
    "overrun": {"retrieval": 30},  # 48 ms, over its 40 ms limit
    "error": {"chat_error": True},
}
SPANS = len(rag_trace().spans)
EVERY = set(SHAPES)


def sdk_samples(trace_id: str, rate: float) -> bool:
    """The OpenTelemetry SDK's own decision for this trace id at this ratio."""
    result = TraceIdRatioBased(rate).should_sample(None, int(trace_id, 16), "span")
    return result.decision is Decision.RECORD_AND_SAMPLE


def trace_ids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


def mix(ids: Iterable[str]) -> dict[str, str]:
    """Trace id → the status its trace is built to get, the four in turn."""
    names = list(SHAPES)
    return {trace_id: names[i % len(names)] for i, trace_id in enumerate(ids)}


def send(collector: Collector, statuses: dict[str, str]) -> None:
    spans = [
        s for tid, name in statuses.items() for s in rag_trace(trace_id=tid, **SHAPES[name]).spans
    ]
    for start in range(0, len(spans), 10 * SPANS):
        send_spans(collector, spans[start : start + 10 * SPANS])


def decided(collector: Collector) -> float:
    return sum(
        collector.metric("spanbudget_forward_traces_total", decision=d, reason=r)
        for d, r in (
            ("kept", "all"),
            ("kept", "status"),
            ("kept", "sampled"),
            ("dropped", "sampled_out"),
        )
    )


def by_trace(receiver: Receiver) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for _, span in receiver.spans.values():
        out.setdefault(span.trace_id.hex(), []).append(span)
    return out


def forward_through(
    tmp_path: Path, statuses: dict[str, str], **policy: Any
) -> tuple[Receiver, Collector]:
    """Send every trace through a collector with this policy; return once it closed (the
    forwarder drained), with the receiver and the collector's metrics."""
    receiver = Receiver()
    with (
        ServerThread(receiver.app) as downstream,
        running_collector(tmp_path, forward_url=downstream.url, **policy) as collector,
    ):
        send(collector, statuses)
        wait_until(lambda: decided(collector) == len(statuses), "every trace decided")
        for trace_id, name in list(statuses.items())[:4]:
            assert collector.verdict(trace_id)["status"] == name  # the shapes do what they say
    return receiver, collector


def test_keeps_the_statuses_asked_for_plus_the_sdk_sampled_share(tmp_path: Path) -> None:
    rate = 0.3
    statuses = mix(trace_ids(48, seed=18))
    receiver, collector = forward_through(
        tmp_path, statuses, forward_keep="overrun,error", forward_sample=rate
    )
    kept = {t for t, name in statuses.items() if name in ("overrun", "error")}
    rest = set(statuses) - kept
    lucky = {t for t in rest if sdk_samples(t, rate)}
    assert 0 < len(lucky) < len(rest)  # the seed gives both outcomes among the rest

    arrived = by_trace(receiver)
    assert set(arrived) == kept | lucky
    for trace_id, trace_spans in arrived.items():
        assert len(trace_spans) == SPANS  # whole traces
        root = next(s for s in trace_spans if not s.parent_span_id)
        attributes = attributes_of(root)
        assert attributes[BUDGET_STATUS] == statuses[trace_id]  # annotated
        if statuses[trace_id] in ("ok", "error"):
            assert attributes[BUDGET_BLAME] == []  # nothing over its limit: an empty array

    def traces(decision: str, reason: str) -> float:
        return collector.metric("spanbudget_forward_traces_total", decision=decision, reason=reason)

    def spans(decision: str, reason: str) -> float:
        return collector.metric("spanbudget_forward_spans_total", decision=decision, reason=reason)

    assert traces("kept", "status") == len(kept)
    assert traces("kept", "sampled") == len(lucky)
    assert traces("dropped", "sampled_out") == len(rest - lucky)
    assert traces("kept", "all") == 0
    assert spans("kept", "status") + spans("kept", "sampled") == receiver.count()
    assert spans("dropped", "sampled_out") == len(rest - lucky) * SPANS
    assert collector.metric("spanbudget_spans_forwarded_total") == receiver.count()


def test_the_counts_are_in_the_metrics_endpoint(tmp_path: Path) -> None:
    receiver = Receiver()
    statuses = mix(trace_ids(8, seed=3))
    with (
        ServerThread(receiver.app) as downstream,
        running_collector(
            tmp_path, forward_url=downstream.url, forward_keep="overrun", forward_sample=0
        ) as collector,
    ):
        send(collector, statuses)
        wait_until(lambda: decided(collector) == len(statuses), "every trace decided")
        text = collector.client.get("/metrics").text
    assert 'spanbudget_forward_traces_total{decision="kept",reason="status"} 2.0' in text
    assert 'spanbudget_forward_traces_total{decision="kept",reason="sampled"} 0.0' in text
    assert 'spanbudget_forward_traces_total{decision="dropped",reason="sampled_out"} 6.0' in text
    assert (
        f'spanbudget_forward_spans_total{{decision="kept",reason="status"}} {2.0 * SPANS}' in text
    )


def test_two_collectors_choose_the_same_traces(tmp_path: Path) -> None:
    rate = 0.5
    statuses = dict.fromkeys(trace_ids(30, seed=7), "ok")
    first, _ = forward_through(tmp_path / "a", statuses, forward_sample=rate)
    second, _ = forward_through(tmp_path / "b", statuses, forward_sample=rate)
    chosen = set(by_trace(first))
    assert chosen == set(by_trace(second))
    assert chosen == {t for t in statuses if sdk_samples(t, rate)}
    assert 0 < len(chosen) < len(statuses)


@pytest.mark.parametrize(
    ("policy", "forwarded", "counts"),
    [
        ({}, EVERY, {"kept/all": 12}),  # no flags: every trace, as before
        (
            {"forward_keep": "overrun,error"},
            {"overrun", "error"},
            {"kept/status": 6, "dropped/sampled_out": 6},
        ),
        (
            {"forward_keep": "overrun", "forward_sample": 1},
            EVERY,
            {"kept/status": 3, "kept/sampled": 9},
        ),
        ({"forward_keep": "", "forward_sample": 1.0}, EVERY, {"kept/sampled": 12}),
        ({"forward_sample": 0}, set(), {"dropped/sampled_out": 12}),
    ],
)
def test_edges_of_the_policy(
    tmp_path: Path, policy: dict[str, Any], forwarded: set[str], counts: dict[str, int]
) -> None:
    statuses = mix(trace_ids(12, seed=5))  # three of each status
    receiver, collector = forward_through(tmp_path, statuses, **policy)
    assert {statuses[t] for t in by_trace(receiver)} == forwarded
    assert receiver.count() == SPANS * sum(name in forwarded for name in statuses.values())
    for key, n in counts.items():
        decision, reason = key.split("/")
        assert (
            collector.metric("spanbudget_forward_traces_total", decision=decision, reason=reason)
            == n
        ), key
    assert decided(collector) == sum(counts.values())  # no other reason given


def _late(trace_id: str, span_id: str) -> Any:
    late = TraceBuilder(trace_id=trace_id)
    late.add("late.cleanup", 500, 501, parent=rag_trace().spans[1].span_id)
    return replace(late.spans[0], span_id=span_id)


def test_late_spans_follow_their_trace_also_after_a_restart(tmp_path: Path) -> None:
    rate = 0.5
    ids = iter(trace_ids(200, seed=11))
    # An overrun trace the sampler would drop: only its status keeps its late spans.
    overrun = next(t for t in ids if not sdk_samples(t, rate))
    lucky = next(t for t in ids if sdk_samples(t, rate))
    unlucky = next(t for t in ids if not sdk_samples(t, rate))
    statuses = {overrun: "overrun", lucky: "ok", unlucky: "ok"}
    policy: dict[str, Any] = {"forward_keep": "overrun", "forward_sample": rate}
    for run, span_id in (("first", "f" * 16), ("after a restart", "e" * 16)):
        receiver = Receiver()
        with (
            ServerThread(receiver.app) as downstream,
            running_collector(tmp_path, forward_url=downstream.url, **policy) as collector,
        ):
            if run == "first":
                send(collector, statuses)
                for trace_id in statuses:
                    collector.verdict(trace_id)
            send_spans(collector, [_late(t, span_id) for t in statuses])
            wait_until(
                lambda: collector.metric("spanbudget_spans_late_total") == len(statuses),
                f"three late spans ({run})",
            )
        late = {
            span.trace_id.hex()
            for _, span in receiver.spans.values()
            if span.name == "late.cleanup"
        }
        assert late == {overrun, lucky}, run
        assert all(
            span.span_id.hex() == span_id
            for _, span in receiver.spans.values()
            if span.name == "late.cleanup"
        )
        assert collector.metric(
            "spanbudget_forward_spans_total", decision="dropped", reason="sampled_out"
        ) == (SPANS + 1 if run == "first" else 1)


def test_sampling_is_the_sdk_trace_id_ratio_sampler() -> None:
    ids = trace_ids(2000, seed=1)
    for rate in (0.0, 0.001, 0.05, 0.5, 0.999, 1.0):
        bound = sample_bound(rate)
        assert [sampled(t, bound) for t in ids] == [sdk_samples(t, rate) for t in ids], rate
    assert sampled("0" * 16 + "f" * 16, sample_bound(1.0))  # the largest id is in at 1
    assert not sampled("f" * 16 + "0" * 16, sample_bound(0.0))  # the smallest is out at 0


@pytest.mark.parametrize(
    ("args", "env", "named", "detail"),
    [
        (["--forward-keep", "overrun,oops"], {}, "--forward-keep", "oops"),
        (["--forward-keep", "absent"], {}, "--forward-keep", "absent"),  # a stage's status only
        (["--forward-sample", "1.5"], {}, "--forward-sample", "1.5"),
        (["--forward-sample=-0.1"], {}, "--forward-sample", "-0.1"),
        (["--forward-sample", "lots"], {}, "--forward-sample", "lots"),
        (["--forward-sample", "nan"], {}, "--forward-sample", "nan"),
        (
            [],
            {"SPANBUDGET_COLLECTOR_FORWARD_SAMPLE": "2"},
            "SPANBUDGET_COLLECTOR_FORWARD_SAMPLE",
            "2",
        ),
        (
            [],
            {"SPANBUDGET_COLLECTOR_FORWARD_KEEP": "slow"},
            "SPANBUDGET_COLLECTOR_FORWARD_KEEP",
            "slow",
        ),
    ],
)
def test_bad_forwarding_values_exit_2_naming_the_flag(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    named: str,
    detail: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # A missing budget: should a bad value slip through, the collector stops (exit 2,
    # naming the budget) instead of serving for ever.
    result = CliRunner().invoke(
        app,
        [
            "collect",
            *("--budget", str(tmp_path / "missing.yaml"), "--db", str(tmp_path / "v.db")),
            *("--forward-otlp", "http://127.0.0.1:9", *args),
        ],
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {named}: ")
    assert detail in lines[0]
    assert not (tmp_path / "v.db").exists()  # refused before anything started


def test_the_environment_sets_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPANBUDGET_COLLECTOR_FORWARD_KEEP", "Overrun, error")
    monkeypatch.setenv("SPANBUDGET_COLLECTOR_FORWARD_SAMPLE", "0.05")
    settings = CollectorSettings()
    assert settings.forward.keep_statuses == frozenset({"overrun", "error"})
    assert settings.forward.sample == 0.05
    monkeypatch.delenv("SPANBUDGET_COLLECTOR_FORWARD_KEEP")
    monkeypatch.delenv("SPANBUDGET_COLLECTOR_FORWARD_SAMPLE")
    assert CollectorSettings().forward.keep_statuses is None  # forward everything
