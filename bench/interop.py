"""Scale-out throughput on this machine, side by side in one run: one `spanbudget collect`,
three behind the real Collector's load balancer (deploy/otelcol-loadbalancing.yaml, a
shard sidecar each), and the anchor, the real Collector's own pass-through pipeline
(OTLP/HTTP in, batch, OTLP/gRPC out) on the same traffic.

Run: .venv/bin/python bench/interop.py [--traces 20000] [--quick]   (after `make binaries`)

Each run sends the same 11-span reference-path traces, pre-encoded as OTLP protobuf
requests of 50 traces, from 4 sender threads that honour 503 + Retry-After, and times
from the first request until every trace is judged (for the pass-through: until its
exporter's own counter shows every span sent, which its telemetry updates every few
seconds: that wall time is an upper bound). Spans per CPU-second count the CPU time of the processes
that do the work (user + system, from /proc): the collectors, and the balancer and its
sidecars where they are in the path. The machine has 2 cores, which every process and the
senders share: three collectors cannot be three times one.
`--quick` sends a few hundred traces: it checks the bench runs, not its numbers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx
from rich.console import Console
from rich.table import Table
from spanbudget.app.processes import Child, Supervisor

from tests.deploy.processes import Otelcol, budget_collector, metric_total
from tests.deploy.traffic import SPANS_PER_TRACE, traffic
from tests.support.otlp import to_request
from tests.support.servers import free_port

sys.path.insert(0, str(REPO / "bench"))
from bench_summary import record

PROTOBUF = {"Content-Type": "application/x-protobuf"}
PER_REQUEST = 50
SENDERS = 4
# The anchor: the Collector passing spans through, to a second Collector that counts them.
PASS_THROUGH = """
receivers:
  otlp:
    protocols:
      http:
        endpoint: "127.0.0.1:${env:OTELCOL_OTLP_HTTP_PORT}"
processors:
  batch:
    send_batch_size: 1024
    timeout: 200ms
exporters:
  otlp_grpc:
    endpoint: "${env:SINK}"
    tls:
      insecure: true
extensions:
  health_check:
    endpoint: "127.0.0.1:${env:OTELCOL_HEALTH_PORT}"
service:
  extensions: [health_check]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: ${env:OTELCOL_METRICS_PORT}
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp_grpc]
"""
SINK = """
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: "127.0.0.1:${env:OTELCOL_OTLP_GRPC_PORT}"
exporters:
  debug:
    verbosity: basic
    sampling_initial: 1
    sampling_thereafter: 100000
extensions:
  health_check:
    endpoint: "127.0.0.1:${env:OTELCOL_HEALTH_PORT}"
service:
  extensions: [health_check]
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
"""


def cpu_seconds(children: list[Child]) -> float:
    """User + system CPU of these processes so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for child in children:
        assert child.process is not None
        with open(f"/proc/{child.process.pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def send_all(url: str, payloads: list[bytes]) -> None:
    """Every payload once, from SENDERS threads; a 503 is retried after its Retry-After."""
    todo = iter(payloads)
    lock = threading.Lock()

    def sender() -> None:
        with httpx.Client(timeout=30) as client:
            while True:
                with lock:
                    body = next(todo, None)
                if body is None:
                    return
                while True:
                    answer = client.post(f"{url}/v1/traces", content=body, headers=PROTOBUF)
                    if answer.status_code == 200:
                        break
                    time.sleep(float(answer.headers.get("Retry-After", "0.1")))

    threads = [threading.Thread(target=sender) for _ in range(SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def judged(urls: list[str]) -> int:
    return int(
        sum(
            metric_total(httpx.get(f"{url}/metrics", timeout=10).text, "spanbudget_traces")
            for url in urls
        )
    )


def run(
    workers: list[Child], url: str, payloads: list[bytes], done: Callable[[], bool]
) -> tuple[float, float]:
    """Seconds from the first request until `done`, and the workers' CPU seconds meanwhile."""
    cpu_before = cpu_seconds(workers)
    started = time.perf_counter()
    send_all(url, payloads)
    while not done():
        time.sleep(0.05)
    return time.perf_counter() - started, cpu_seconds(workers) - cpu_before


@contextmanager
def started(children: list[Child]) -> Iterator[Supervisor]:
    supervisor = Supervisor()
    try:
        for child in children:
            supervisor.start(child)
        for child in children:
            supervisor.wait_healthy(child, 120)
        yield supervisor
    finally:
        supervisor.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=20000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    count = 300 if args.quick else args.traces
    sent = traffic(count, seed=1)
    payloads = [
        to_request(
            [span for trace in sent[i : i + PER_REQUEST] for span in trace.spans]
        ).SerializeToString()
        for i in range(0, count, PER_REQUEST)
    ]
    spans = count * SPANS_PER_TRACE
    rows: list[tuple[str, float, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # One collector.
        port = free_port()
        one = [budget_collector("one", port, root)]
        with started(one):
            url = f"http://127.0.0.1:{port}"
            wall, cpu = run(one, url, payloads, lambda: judged([url]) >= count)
        rows.append(("one spanbudget collect", wall, cpu, spans / wall))
        # Three behind the balancer.
        ports = [free_port() for _ in range(3)]
        shards = [
            Otelcol("otelcol-shard.yaml", {"BUDGET_COLLECTOR_ENDPOINT": f"http://127.0.0.1:{p}"})
            for p in ports
        ]
        front = Otelcol(
            "otelcol-loadbalancing.yaml",
            {
                "BUDGET_COLLECTORS": "[" + ", ".join(s.otlp_grpc for s in shards) + "]",
                "JAEGER_OTLP_ENDPOINT": f"127.0.0.1:{free_port()}",  # nothing forwarded
            },
        )
        collectors = [budget_collector(f"c{i}", p, root) for i, p in enumerate(ports)]
        otelcols = [*(s.child(f"shard-{i}", root) for i, s in enumerate(shards))]
        otelcols.append(front.child("front", root))
        with started([*collectors, *otelcols]):
            urls = [f"http://127.0.0.1:{p}" for p in ports]
            wall, cpu = run(collectors, front.otlp_http, payloads, lambda: judged(urls) >= count)
            otelcol_cpu = cpu_seconds(otelcols)
        rows.append(("three behind load_balancing: collectors", wall, cpu, spans / wall))
        rows.append(("  the balancer and its 3 sidecars (whole run)", wall, otelcol_cpu, 0.0))
        # The anchor: the Collector's own pass-through.
        (root / "pass.yaml").write_text(PASS_THROUGH)
        (root / "sink.yaml").write_text(SINK)
        sink = Otelcol(str(root / "sink.yaml"))
        passing = Otelcol(str(root / "pass.yaml"), {"SINK": sink.otlp_grpc})
        anchor = passing.child("pass-through", root)
        with started([sink.child("sink", root), anchor]):
            wall, cpu = run(
                [anchor],
                passing.otlp_http,
                payloads,
                lambda: metric_total(passing.metrics(), "otelcol_exporter_sent_spans") >= spans,
            )
        rows.append(("Collector pass-through (otlp > batch > otlp)", wall, cpu, spans / wall))

    table = Table(title=f"{count} traces, {spans:,} spans, {SENDERS} senders, 2 cores shared")
    for column in ("run", "wall s", "CPU s", "spans/s", "spans per CPU-s"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for name, wall, cpu, rate in rows:
        per_cpu = f"{spans / cpu:,.0f}" if cpu else "-"
        table.add_row(name, f"{wall:.2f}", f"{cpu:.2f}", f"{rate:,.0f}" if rate else "", per_cpu)
    Console().print(table)
    one_rate, three_rate, anchor_rate = rows[0][3], rows[1][3], rows[3][3]
    one_per_cpu, anchor_per_cpu = spans / rows[0][2], spans / rows[3][2]
    print(
        f"three / one collector: {three_rate / one_rate:.2f}x spans/s; "
        f"Collector pass-through / one collector: {anchor_per_cpu / one_per_cpu:.1f}x "
        "spans per CPU-second"
    )
    record(
        "interop",
        "three collectors behind load_balancing / one (spans/s)",
        three_rate / one_rate,
        "x",
        aim="> 1 (the cores bound it)",
        met=three_rate > one_rate,
    )
    record(
        "interop",
        "one collector, spans per CPU-second",
        one_per_cpu,
        "spans/CPU-s",
        aim="report",
        floor=anchor_per_cpu,
        floor_name="the Collector's pass-through",
    )
    del anchor_rate


if __name__ == "__main__":
    main()
