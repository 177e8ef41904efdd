"""Scale-out as docs/deployment.md sets it up, on the real Collector and the real Jaeger:
traffic -> Collector (deploy/otelcol-loadbalancing.yaml: load_balancing by trace id, static
resolver, OTLP/gRPC) -> three budget collectors' own OTLP/gRPC listeners, nothing between
-> the Collector's annotated pipeline -> Jaeger.

Traffic comes as services send it: each trace in three parts a few requests apart,
children before parents. Every trace is judged exactly once, whole, with the verdict one
collector gives the same traffic; a budget collector stopped and restarted mid-run loses
nothing and judges no trace from a fragment, with SIGTERM (it judges the traces it holds
whole and leaves the rest to its journal) and with SIGKILL (its intake journal gives back
what it had acknowledged and not yet judged), while the balancer's per-backend queue holds
what could not be delivered."""

from __future__ import annotations

import signal
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from spanbudget.app.processes import Child, Supervisor
from spanbudget.app.stack import Jaeger

from tests.support.binaries import go_binary
from tests.support.servers import free_port, wait_until
from tests.support.stack import jaeger_on_free_ports

from .processes import Otelcol, all_verdicts, budget_collector, metric_total
from .traffic import SPANS_PER_TRACE, send, send_spans, split_requests, traffic

SHARDS = 3


@dataclass
class ScaleOut:
    supervisor: Supervisor
    front: Otelcol
    collectors: list[Child]
    urls: list[str]
    jaeger: Jaeger
    reference: str  # one budget collector alone, given the same traffic

    def verdicts(self) -> list[dict[str, dict[str, Any]]]:
        return [all_verdicts(url) for url in self.urls]


@contextmanager
def scale_out(root: Path) -> Iterator[ScaleOut]:
    jaeger = jaeger_on_free_ports(go_binary("jaeger"))
    ports = [free_port() for _ in range(SHARDS)]
    grpc_ports = [free_port() for _ in range(SHARDS)]
    front = Otelcol(
        "otelcol-loadbalancing.yaml",
        {
            "BUDGET_COLLECTORS": "[" + ", ".join(f"127.0.0.1:{p}" for p in grpc_ports) + "]",
            "JAEGER_OTLP_ENDPOINT": f"127.0.0.1:{jaeger.otlp_grpc_port}",
        },
    )
    collectors = [
        budget_collector(
            f"budget-{i}", port, root, "--forward-otlp", front.annotated, grpc_port=grpc_port
        )
        for i, (port, grpc_port) in enumerate(zip(ports, grpc_ports, strict=True))
    ]
    for collector in collectors:  # the balancer retries every 5 s at most (7.5 with jitter)
        collector.env = {**collector.env, "SPANBUDGET_COLLECTOR_REPLAY_WAIT_SECONDS": "10"}
    reference_port = free_port()
    children = [
        jaeger.child(root / "jaeger.log"),
        *collectors,
        front.child("front", root),
        budget_collector("reference", reference_port, root),
    ]
    supervisor = Supervisor()
    try:
        for child in children:  # each once the one it sends to answers, as compose does
            supervisor.start(child)
            supervisor.wait_healthy(child, 120)
        yield ScaleOut(
            supervisor,
            front,
            collectors,
            [f"http://127.0.0.1:{port}" for port in ports],
            jaeger,
            f"http://127.0.0.1:{reference_port}",
        )
    finally:
        supervisor.stop_all()


def _same_verdict(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (
        a["status"] == b["status"]
        and a["blame"] == b["blame"]
        and a["ttft_ms"] == pytest.approx(b["ttft_ms"])
        and [s["ms"] for s in a["stages"]] == pytest.approx([s["ms"] for s in b["stages"]])
    )


def _from_a_fragment(verdict: dict[str, Any]) -> bool:
    """Judged before the whole trace was in: too few spans, or spans met after judging."""
    return bool(
        verdict["spans"] != SPANS_PER_TRACE or verdict["late_spans"] or verdict.get("revisions")
    )


def _settled(stack: ScaleOut, expected: int, quiet_s: float = 5) -> list[dict[str, dict[str, Any]]]:
    """The collectors' verdicts once `expected` traces are judged, or nothing moved for
    `quiet_s` seconds."""
    last: tuple[int, float] = (-1, time.monotonic())
    deadline = time.monotonic() + 120
    while True:
        shares = stack.verdicts()
        judged = sum(len(share) for share in shares)
        if judged >= expected or time.monotonic() > deadline:
            return shares
        if judged != last[0]:
            last = (judged, time.monotonic())
        elif time.monotonic() - last[1] > quiet_s:
            return shares
        time.sleep(0.5)


def test_every_trace_is_judged_once_whole_and_as_one_collector_judges_it(
    tmp_path: Path,
) -> None:
    sent = traffic(600, seed=34)
    with scale_out(tmp_path) as stack, httpx.Client(timeout=10) as client:
        for request in split_requests(sent, per_request=20):
            send_spans(client, stack.front.otlp_http, request)
            send_spans(client, stack.reference, request)
        shares = _settled(stack, len(sent))
        wait_until(lambda: len(all_verdicts(stack.reference)) == len(sent), "the reference")
        alone = all_verdicts(stack.reference)

        ids = [trace.trace_id for trace in sent]
        judged = [trace_id for share in shares for trace_id in share]
        assert sorted(judged) == sorted(ids)  # each once: no trace lost, none split or twice
        assert all(len(share) > len(sent) / SHARDS / 2 for share in shares), [
            len(s) for s in shares
        ]
        merged = {trace_id: v for share in shares for trace_id, v in share.items()}
        assert not [t for t, v in merged.items() if _from_a_fragment(v)]  # whole, first time
        assert all(_same_verdict(merged[t], alone[t]) for t in ids)
        statuses = {v["status"] for v in merged.values()}
        assert {"ok", "overrun"} <= statuses, statuses
        grpc = [
            metric_total(
                httpx.get(f"{url}/metrics", timeout=5).text,
                "spanbudget_intake_spans",
                transport="grpc",
            )
            for url in stack.urls
        ]
        assert sum(grpc) == len(sent) * SPANS_PER_TRACE  # all of it over OTLP/gRPC

        # Jaeger has every span of every trace, annotated, through the annotated pipeline.
        def in_jaeger() -> bool:
            return all(
                len(_jaeger_spans(client, stack.jaeger.query_url, t)) == SPANS_PER_TRACE
                for t in ids
            )

        wait_until(in_jaeger, "every trace in Jaeger", timeout=30, every=1)
        print(
            f"\nsteady: {len(sent)} traces sent; judged per collector "
            f"{[len(share) for share in shares]}; from a fragment 0; twice 0; lost 0; "
            f"statuses {sorted(statuses)}; spans received over OTLP/gRPC {grpc}"
        )


def _jaeger_spans(client: httpx.Client, jaeger: str, trace_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"{jaeger}/api/traces/{trace_id}", params={"raw": "true"})
    if answer.status_code != 200:
        return []
    spans: list[dict[str, Any]] = answer.json()["data"][0]["spans"]
    return spans


@dataclass
class Outage:
    """When the victim went down and when it answered again (wall clock, seconds)."""

    down: float = 0.0
    up: float = 0.0
    last_sent: dict[str, float] = field(default_factory=dict)  # trace id -> its last part


def _judged_at(verdict: dict[str, Any]) -> float:
    return datetime.fromisoformat(verdict["evaluated_at"]).timestamp()


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_collector_stopped_and_restarted_mid_run(tmp_path: Path, how: signal.Signals) -> None:
    """600 traces over 10 s, each in three parts 0.2 s apart; collector 1 is stopped at 3 s
    and started again at 6 s on the same ports and store. The balancer's queue holds its
    share meanwhile; what it had acknowledged comes back from its journal."""
    sent = traffic(600, seed=35)
    requests = split_requests(sent, per_request=6)
    outage = Outage()
    with scale_out(tmp_path) as stack, httpx.Client(timeout=10) as client:
        victim = stack.collectors[1]

        def restart() -> None:
            time.sleep(3)
            assert victim.process is not None
            stack.supervisor.children.remove(victim)
            outage.down = time.time()
            victim.process.send_signal(how)
            victim.process.wait(timeout=30)
            time.sleep(3)
            stack.supervisor.start(victim)
            stack.supervisor.wait_healthy(victim, 60)
            outage.up = time.time()

        chaos = threading.Thread(target=restart)
        chaos.start()
        started = time.monotonic()
        for i, request in enumerate(requests):
            time.sleep(max(0.0, started + i * 0.1 - time.monotonic()))
            send_spans(client, stack.front.otlp_http, request)
            now = time.time()
            for trace_id in {span.trace_id for span in request}:
                outage.last_sent[trace_id] = now
        chaos.join()
        shares = _settled(stack, len(sent), quiet_s=20)

        ids = {trace.trace_id for trace in sent}
        seen: dict[str, int] = {}
        for share in shares:
            for trace_id in share:
                seen[trace_id] = seen.get(trace_id, 0) + 1
        twice = sum(1 for n in seen.values() if n > 1)
        merged = {trace_id: v for share in shares for trace_id, v in share.items()}
        fragments = sorted(t for t, v in merged.items() if _from_a_fragment(v))
        lost = len(ids - set(seen))
        # What the restart cost: the victim's traces judged more than 2 s after their last
        # part was sent (the decision wait is 0.5 s), and how late the last of them came.
        waits = {t: _judged_at(v) - outage.last_sent[t] for t, v in shares[1].items() if t in ids}
        delayed = sorted(w for w in waits.values() if w > 2)
        last_verdict = max(_judged_at(v) for v in shares[1].values())
        victim_metrics = httpx.get(f"{stack.urls[1]}/metrics", timeout=5).text
        print(
            f"\n{how.name}: {len(sent)} traces sent; judged per collector "
            f"{[len(share) for share in shares]}; from a fragment {len(fragments)}; "
            f"twice {twice}; lost {lost}\n"
            f"  down {outage.up - outage.down:.1f} s (signal to healthy again); "
            f"{len(delayed)} of collector 1's {len(waits)} traces judged late, "
            f"by {statistics.median(delayed) if delayed else 0:.1f} s median, "
            f"{max(delayed, default=0):.1f} s at most; its last verdict "
            f"{last_verdict - outage.up:.1f} s after it was back; since then it took "
            f"{metric_total(victim_metrics, 'spanbudget_intake_spans', transport='grpc'):.0f}"
            " spans over OTLP/gRPC"
        )
        assert twice == 0  # the balancer keeps each trace id on one collector
        assert set(seen) <= ids
        assert lost == 0
        assert fragments == []


def test_one_view_over_three_collectors_from_jaeger(tmp_path: Path) -> None:
    """A fourth collector with --pull-jaeger judges what the three forwarded to Jaeger: every
    trace is findable in its API and web UI, and its overview's figures equal those of one
    collector given all the traffic."""
    sent = traffic(300, seed=37, ended_ago_s=30)
    with scale_out(tmp_path) as stack, httpx.Client(timeout=10) as client:
        port = free_port()
        view = budget_collector(
            "view",
            port,
            tmp_path,
            *("--pull-jaeger", stack.jaeger.query_url, "--pull-service", "rag-gateway"),
        )
        view.env = {**view.env, "SPANBUDGET_COLLECTOR_PULL_EVERY_SECONDS": "1"}
        stack.supervisor.start(view)
        stack.supervisor.wait_healthy(view, 60)
        for start in range(0, len(sent), 20):
            send(client, stack.front.otlp_http, sent[start : start + 20])
            send(client, stack.reference, sent[start : start + 20])
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: len(all_verdicts(url)) == len(sent), "the view", timeout=90, every=1)
        shares = _settled(stack, len(sent))
        assert sum(len(share) for share in shares) == len(sent)
        assert all(0 < len(share) < len(sent) for share in shares)  # each sees a part only
        seen = all_verdicts(url)
        alone = all_verdicts(stack.reference)
        assert set(seen) == {trace.trace_id for trace in sent}
        assert all(_same_verdict(seen[t], alone[t]) for t in seen)

        def summary(base: str) -> dict[str, Any]:
            figures: dict[str, Any] = client.get(f"{base}/api/summary").json()
            figures["stages"] = {stage.pop("name"): stage for stage in figures["stages"]}
            return figures

        assert summary(url) == summary(stack.reference)
        overview = client.get(f"{url}/")
        assert overview.status_code == 200
        trace_page = client.get(f"{url}/traces/{sent[0].trace_id}")
        assert trace_page.status_code == 200
