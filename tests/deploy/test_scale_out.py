"""Scale-out as docs/deployment.md sets it up, on the real Collector and the real Jaeger:
traffic -> Collector (deploy/otelcol-loadbalancing.yaml: load_balancing by trace id, static
resolver) -> a shard sidecar each (deploy/otelcol-shard.yaml) -> three budget collectors ->
the Collector's annotated pipeline -> Jaeger.

Every trace is judged exactly once, whole, with the verdict one collector gives the same
traffic; a budget collector stopped and restarted mid-run loses nothing, with SIGTERM
(it judges what it holds before exiting) and with SIGKILL (its intake journal gives back
what it had acknowledged and not yet judged)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from spanbudget.app.processes import Child, Supervisor
from spanbudget.app.stack import Jaeger

from tests.support.binaries import go_binary
from tests.support.servers import free_port, wait_until

from .processes import Otelcol, all_verdicts, budget_collector, metric_total
from .traffic import SPANS_PER_TRACE, send, traffic

SHARDS = 3


@dataclass
class ScaleOut:
    supervisor: Supervisor
    front: Otelcol
    shards: list[Otelcol]
    collectors: list[Child]
    urls: list[str]
    jaeger: Jaeger
    reference: str  # one budget collector alone, given the same traffic

    def verdicts(self) -> list[dict[str, dict[str, Any]]]:
        return [all_verdicts(url) for url in self.urls]


@contextmanager
def scale_out(root: Path) -> Iterator[ScaleOut]:
    jaeger = Jaeger(
        go_binary("jaeger"),
        query_port=free_port(),
        otlp_http_port=free_port(),
        otlp_grpc_port=free_port(),
        health_port=free_port(),
        query_grpc_port=free_port(),
        metrics_port=free_port(),
    )
    ports = [free_port() for _ in range(SHARDS)]
    shards = [
        Otelcol("otelcol-shard.yaml", {"BUDGET_COLLECTOR_ENDPOINT": f"http://127.0.0.1:{port}"})
        for port in ports
    ]
    front = Otelcol(
        "otelcol-loadbalancing.yaml",
        {
            "BUDGET_COLLECTORS": "[" + ", ".join(shard.otlp_grpc for shard in shards) + "]",
            "JAEGER_OTLP_ENDPOINT": f"127.0.0.1:{jaeger.otlp_grpc_port}",
        },
    )
    collectors = [
        budget_collector(f"budget-{i}", port, root, "--forward-otlp", front.annotated)
        for i, port in enumerate(ports)
    ]
    reference_port = free_port()
    children = [
        jaeger.child(root / "jaeger.log"),
        *collectors,
        *(shard.child(f"shard-{i}", root) for i, shard in enumerate(shards)),
        front.child("front", root),
        budget_collector("reference", reference_port, root),
    ]
    supervisor = Supervisor()
    try:
        for child in children:
            supervisor.start(child)
        for child in children:
            supervisor.wait_healthy(child, 120)
        yield ScaleOut(
            supervisor,
            front,
            shards,
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


def _settled(stack: ScaleOut, expected: int) -> list[dict[str, dict[str, Any]]]:
    """The collectors' verdicts once `expected` traces are judged, or nothing moved for 5 s."""
    last: tuple[int, float] = (-1, time.monotonic())
    deadline = time.monotonic() + 120
    while True:
        shares = stack.verdicts()
        judged = sum(len(share) for share in shares)
        if judged >= expected or time.monotonic() > deadline:
            return shares
        if judged != last[0]:
            last = (judged, time.monotonic())
        elif time.monotonic() - last[1] > 5:
            return shares
        time.sleep(0.5)


def test_every_trace_is_judged_once_whole_and_as_one_collector_judges_it(
    tmp_path: Path,
) -> None:
    sent = traffic(600, seed=34)
    with scale_out(tmp_path) as stack, httpx.Client(timeout=10) as client:
        for start in range(0, len(sent), 20):
            batch = sent[start : start + 20]
            send(client, stack.front.otlp_http, batch)
            send(client, stack.reference, batch)
        shares = _settled(stack, len(sent))
        alone = all_verdicts(stack.reference)
        wait_until(lambda: len(all_verdicts(stack.reference)) == len(sent), "the reference")
        alone = all_verdicts(stack.reference)

        ids = [trace.trace_id for trace in sent]
        judged = [trace_id for share in shares for trace_id in share]
        assert sorted(judged) == sorted(ids)  # each once: no trace lost, none split or twice
        assert all(len(share) > len(sent) / SHARDS / 2 for share in shares), [
            len(s) for s in shares
        ]
        merged = {trace_id: v for share in shares for trace_id, v in share.items()}
        assert all(v["spans"] == SPANS_PER_TRACE for v in merged.values())  # whole
        assert all(_same_verdict(merged[t], alone[t]) for t in ids)
        statuses = {v["status"] for v in merged.values()}
        assert {"ok", "overrun"} <= statuses, statuses

        # Jaeger has every span of every trace, annotated, through the annotated pipeline.
        def in_jaeger() -> bool:
            return all(
                len(_jaeger_spans(client, stack.jaeger.query_url, t)) == SPANS_PER_TRACE
                for t in ids
            )

        wait_until(in_jaeger, "every trace in Jaeger", timeout=30, every=1)
        balancer = stack.front.metrics()
        sent_spans = metric_total(balancer, "otelcol_exporter_sent_spans")
        print(
            f"\nsteady: {len(sent)} traces sent; judged per collector "
            f"{[len(share) for share in shares]}; incomplete 0; duplicates 0; lost 0; "
            f"statuses {sorted(statuses)}; front exporters sent {sent_spans:.0f} spans"
        )


def _jaeger_spans(client: httpx.Client, jaeger: str, trace_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"{jaeger}/api/traces/{trace_id}", params={"raw": "true"})
    if answer.status_code != 200:
        return []
    spans: list[dict[str, Any]] = answer.json()["data"][0]["spans"]
    return spans


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_collector_stopped_and_restarted_mid_run(tmp_path: Path, how: signal.Signals) -> None:
    """600 traces over 10 s; collector 1 is stopped at 3 s and started again at 6 s on the
    same port and store. Its shard sidecar holds what it could not deliver (queue, retry)."""
    sent = traffic(600, seed=35)
    with scale_out(tmp_path) as stack, httpx.Client(timeout=10) as client:
        victim = stack.collectors[1]

        def restart() -> None:
            time.sleep(3)
            assert victim.process is not None
            stack.supervisor.children.remove(victim)
            victim.process.send_signal(how)
            victim.process.wait(timeout=30)
            time.sleep(3)
            stack.supervisor.start(victim)
            stack.supervisor.wait_healthy(victim, 60)

        chaos = threading.Thread(target=restart)
        chaos.start()
        started = time.monotonic()
        for i, start in enumerate(range(0, len(sent), 6)):
            time.sleep(max(0.0, started + i * 0.1 - time.monotonic()))
            send(client, stack.front.otlp_http, sent[start : start + 6])
        chaos.join()
        shares = _settled(stack, len(sent))

        ids = {trace.trace_id for trace in sent}
        seen: dict[str, int] = {}
        for share in shares:
            for trace_id in share:
                seen[trace_id] = seen.get(trace_id, 0) + 1
        duplicates = sum(1 for n in seen.values() if n > 1)
        merged = {trace_id: v for share in shares for trace_id, v in share.items()}
        incomplete = sum(
            1 for v in merged.values() if v["spans"] != SPANS_PER_TRACE or v["late_spans"]
        )
        lost = len(ids - set(seen))
        shard = stack.shards[1].metrics()
        balancer = [
            line
            for line in stack.front.metrics().splitlines()
            if line.startswith(
                ("otelcol_loadbalancer_backend_outcome", "otelcol_loadbalancer_num_backends")
            )
        ]
        print(
            f"\n{how.name}: {len(sent)} traces sent; judged per collector "
            f"{[len(share) for share in shares]}; incomplete {incomplete}; "
            f"duplicates {duplicates}; lost {lost}; shard 1 exporter: sent "
            f"{metric_total(shard, 'otelcol_exporter_sent_spans'):.0f} spans, failed "
            f"{metric_total(shard, 'otelcol_exporter_send_failed_spans'):.0f}\n"
            "the balancer: " + "\n  ".join(balancer)
        )
        assert duplicates == 0  # the balancer keeps each trace id on one collector
        assert set(seen) <= ids
        assert lost == 0
        assert incomplete == 0


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
