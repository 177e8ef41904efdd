"""Scale-out throughput on this machine, side by side in one run: one `spanbudget collect`
over OTLP/HTTP and over OTLP/gRPC, three behind the real Collector's load balancer
(deploy/otelcol-loadbalancing.yaml, OTLP/gRPC straight to each), the real Collector's own
pass-through pipeline (OTLP/HTTP in, batch, OTLP/gRPC out), and the anchor: the real
Collector's `tail_sampling` processor, which holds whole traces as a budget collector does,
on the same traffic.

The tail sampler waits the budget collectors' own `--decision-wait` (it decides on a
one-second tick, so that is rounded up), holds up to every trace of the run in memory
(`num_traces`: none is evicted early, which the run checks in the sampler's telemetry), and
evaluates two policies on every trace: `latency` above 1 s (this traffic's traces last
400-550 ms, so it reads every span of each) and `string_attribute` service.name = vllm
(every trace reaches the engine, so every trace is kept). Every span it is sent, it
exports: its exporter's counter shows them all leave, as for the pass-through.

Run: .venv/bin/python bench/interop.py [--traces 20000] [--quick]   (after `make binaries`)

Each run sends the same 11-span reference-path traces, pre-encoded as OTLP protobuf
requests of 50 traces, from 4 sender threads (httpx posting the bodies, or grpcio calling
TraceService/Export with them) that honour 503 + Retry-After and UNAVAILABLE + RetryInfo,
and times from the first request until every trace is judged (for the pass-through: until
its exporter's own counter shows every span sent, which its telemetry updates every few
seconds: that wall time is an upper bound). Spans per CPU-second count the CPU time of
the processes that do the work (user + system, from /proc): the collectors, and the
balancer where it is in the path. The machine has 2 cores, which every process and the
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
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import grpc
import httpx
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from rich.console import Console
from rich.table import Table
from spanbudget.app.processes import Child, Supervisor
from spanbudget.collector.intake.grpc_server import EXPORT_METHOD

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
# The anchor: the pass-through with the tail sampler before its batch processor.
TAIL_SAMPLING = PASS_THROUGH.replace(
    """processors:
""",
    """processors:
  tail_sampling:
    decision_wait: ${env:DECISION_WAIT}
    num_traces: ${env:NUM_TRACES}
    policies:
      - name: slow
        type: latency
        latency: {threshold_ms: 1000}
      - name: reached-the-engine
        type: string_attribute
        string_attribute: {key: service.name, values: [vllm]}
""",
).replace("processors: [batch]", "processors: [tail_sampling, batch]")
TAIL = "otelcol_processor_tail_sampling_"
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


TICK = 1 / os.sysconf("SC_CLK_TCK")  # the kernel counts CPU time in clock ticks


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


def post_http(url: str) -> Callable[[Iterator[bytes]], None]:
    """A sender posting each body to `url`'s /v1/traces; a 503 waits out its Retry-After."""

    def sender(bodies: Iterator[bytes]) -> None:
        with httpx.Client(timeout=30) as client:
            for body in bodies:
                while True:
                    answer = client.post(f"{url}/v1/traces", content=body, headers=PROTOBUF)
                    if answer.status_code == 200:
                        break
                    time.sleep(float(answer.headers.get("Retry-After", "0.1")))

    return sender


def export_grpc(address: str) -> Callable[[Iterator[bytes]], None]:
    """A sender calling TraceService/Export at `address` with each body as it is encoded;
    UNAVAILABLE waits out its RetryInfo."""

    def sender(bodies: Iterator[bytes]) -> None:
        with grpc.insecure_channel(address) as channel:
            export = channel.unary_unary(EXPORT_METHOD)
            for body in bodies:
                while True:
                    try:
                        export(body, timeout=30)
                        break
                    except grpc.RpcError as error:
                        if error.code() is not grpc.StatusCode.UNAVAILABLE:
                            raise
                        time.sleep(_retry_delay(error))

    return sender


def _retry_delay(error: grpc.RpcError) -> float:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        info = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return 0.1


def send_all(sender: Callable[[Iterator[bytes]], None], payloads: list[bytes]) -> None:
    """Every payload once, shared out among SENDERS threads."""
    todo = iter(payloads)
    lock = threading.Lock()

    def bodies() -> Iterator[bytes]:
        while True:
            with lock:
                body = next(todo, None)
            if body is None:
                return
            yield body

    threads = [threading.Thread(target=sender, args=(bodies(),)) for _ in range(SENDERS)]
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


def _all_judged(urls: list[str], count: int) -> bool:
    return judged(urls) >= count


def run(
    workers: list[Child],
    sender: Callable[[Iterator[bytes]], None],
    payloads: list[bytes],
    done: Callable[[], bool],
) -> tuple[float, float]:
    """Seconds from the first request until `done`, and the workers' CPU seconds meanwhile.

    The kernel counts CPU in clock ticks: a run shorter than one (the Collector's
    pass-through on `--quick`'s few spans) counts as one tick, so its figure per CPU-second
    is a lower bound, marked so in the table, and never a division by zero."""
    cpu_before = cpu_seconds(workers)
    started = time.perf_counter()
    send_all(sender, payloads)
    while not done():
        time.sleep(0.05)
    return time.perf_counter() - started, max(cpu_seconds(workers) - cpu_before, TICK)


@contextmanager
def started(children: list[Child]) -> Iterator[Supervisor]:
    supervisor = Supervisor()
    try:
        for child in children:  # each once the one it sends to answers
            supervisor.start(child)
            supervisor.wait_healthy(child, 120)
        yield supervisor
    finally:
        supervisor.stop_all()


def tail_sampled(
    root: Path, payloads: list[bytes], traces: int, decision_wait: str
) -> tuple[float, float]:
    """The Collector's tail sampler on `payloads`: seconds until its exporter has sent every
    span, and its CPU seconds meanwhile. Exits if it did not hold, decide and keep every
    trace: then the figure would not be the anchor."""
    spans = traces * SPANS_PER_TRACE
    (root / "tail.yaml").write_text(TAIL_SAMPLING)
    (root / "tail-sink.yaml").write_text(SINK)
    sink = Otelcol(str(root / "tail-sink.yaml"))
    sampler = Otelcol(
        str(root / "tail.yaml"),
        {"SINK": sink.otlp_grpc, "DECISION_WAIT": decision_wait, "NUM_TRACES": str(traces)},
    )
    anchor = sampler.child("tail-sampling", root)

    def all_sent() -> bool:
        text = sampler.metrics()
        if metric_total(text, f"{TAIL}sampling_trace_dropped_too_early"):
            raise SystemExit("the tail sampler dropped traces before deciding: raise num_traces")
        return metric_total(text, "otelcol_exporter_sent_spans") >= spans

    with started([sink.child("tail-sink", root), anchor]):
        wall, cpu = run([anchor], post_http(sampler.otlp_http), payloads, all_sent)
        text = sampler.metrics()
    kept = int(metric_total(text, f"{TAIL}global_count_traces_sampled", sampled="true"))
    decided = int(metric_total(text, f"{TAIL}global_count_traces_sampled"))
    if decided != traces or kept != traces:
        raise SystemExit(f"the tail sampler decided {decided} traces and kept {kept} of {traces}")
    return wall, cpu


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
        # One collector, over each transport, one after the other.
        for transport in ("OTLP/HTTP", "OTLP/gRPC"):
            port, grpc_port = free_port(), free_port()
            one = [budget_collector(f"one-{len(rows)}", port, root, grpc_port=grpc_port)]
            with started(one):
                url = f"http://127.0.0.1:{port}"
                sender = (
                    post_http(url)
                    if transport == "OTLP/HTTP"
                    else export_grpc(f"127.0.0.1:{grpc_port}")
                )
                wall, cpu = run(one, sender, payloads, partial(_all_judged, [url], count))
            rows.append((f"one spanbudget collect, {transport}", wall, cpu, spans / wall))
        # Three behind the balancer, which sends OTLP/gRPC to each.
        ports = [free_port() for _ in range(3)]
        grpc_ports = [free_port() for _ in range(3)]
        front = Otelcol(
            "otelcol-loadbalancing.yaml",
            {
                "BUDGET_COLLECTORS": "[" + ", ".join(f"127.0.0.1:{p}" for p in grpc_ports) + "]",
                "JAEGER_OTLP_ENDPOINT": f"127.0.0.1:{free_port()}",  # nothing forwarded
            },
        )
        collectors = [
            budget_collector(f"c{i}", p, root, grpc_port=g)
            for i, (p, g) in enumerate(zip(ports, grpc_ports, strict=True))
        ]
        balancer = front.child("front", root)
        with started([*collectors, balancer]):
            urls = [f"http://127.0.0.1:{p}" for p in ports]
            wall, cpu = run(
                collectors, post_http(front.otlp_http), payloads, partial(_all_judged, urls, count)
            )
            balancer_cpu = cpu_seconds([balancer])
        rows.append(("three behind load_balancing (OTLP/gRPC)", wall, cpu, spans / wall))
        rows.append(("  the balancer (whole run)", wall, balancer_cpu, 0.0))
        # The Collector's own pass-through: its cost with no work of its own.
        (root / "pass.yaml").write_text(PASS_THROUGH)
        (root / "sink.yaml").write_text(SINK)
        sink = Otelcol(str(root / "sink.yaml"))
        passing = Otelcol(str(root / "pass.yaml"), {"SINK": sink.otlp_grpc})
        through = passing.child("pass-through", root)
        with started([sink.child("sink", root), through]):
            wall, cpu = run(
                [through],
                post_http(passing.otlp_http),
                payloads,
                lambda: metric_total(passing.metrics(), "otelcol_exporter_sent_spans") >= spans,
            )
        rows.append(("Collector pass-through (otlp > batch > otlp)", wall, cpu, spans / wall))
        # The anchor: the Collector's tail sampler, waiting as the budget collectors do.
        argv = list(one[0].argv)
        wait = argv[argv.index("--decision-wait") + 1]
        wall, cpu = tail_sampled(root, payloads, count, wait)
        rows.append((f"Collector tail_sampling ({wait}) > batch > otlp", wall, cpu, spans / wall))

    table = Table(title=f"{count} traces, {spans:,} spans, {SENDERS} senders, 2 cores shared")
    for column in ("run", "wall s", "CPU s", "spans/s", "spans per CPU-s"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for name, wall, cpu, rate in rows:
        bound = "≥ " if cpu <= TICK else ""  # under one clock tick: see `run`
        per_cpu = f"{bound}{spans / cpu:,.0f}" if cpu else "-"
        table.add_row(name, f"{wall:.2f}", f"{cpu:.2f}", f"{rate:,.0f}" if rate else "", per_cpu)
    Console(width=120).print(table)
    http, over_grpc, three, passed, sampled = rows[0], rows[1], rows[2], rows[4], rows[5]
    one_rate, three_rate = http[3], three[3]
    one_per_cpu, grpc_per_cpu = spans / http[2], spans / over_grpc[2]
    pass_per_cpu, anchor_per_cpu = spans / passed[2], spans / sampled[2]
    print(
        f"tail_sampling decided all {count} traces and kept every one, none evicted early"
        " (its own telemetry); its wall time holds its decision wait and tick, and the"
        " pass-through's and its wait for their exporter's counter: compare them per CPU-second"
    )
    print(
        f"one collector, OTLP/gRPC / OTLP/HTTP: {over_grpc[3] / one_rate:.2f}x spans/s, "
        f"{grpc_per_cpu / one_per_cpu:.2f}x spans per CPU-second; "
        f"three / one collector: {three_rate / one_rate:.2f}x spans/s; per CPU-second, "
        f"one collector / Collector tail_sampling: {one_per_cpu / anchor_per_cpu:.2f}x "
        f"(OTLP/gRPC {grpc_per_cpu / anchor_per_cpu:.2f}x); "
        f"Collector pass-through / one collector: {pass_per_cpu / one_per_cpu:.1f}x"
    )
    record(
        "interop",
        "the Collector's tail_sampling, spans per CPU-second",
        anchor_per_cpu,
        "spans/CPU-s",
        aim="none: the anchor (issue 46)",
        anchor=True,
    )
    record(
        "interop",
        "three collectors behind load_balancing / one (spans/s)",
        three_rate / one_rate,
        "x",
        aim="> 1 (the cores bound it)",
        met=three_rate > one_rate,
    )
    for transport, per_cpu in (("OTLP/HTTP", one_per_cpu), ("OTLP/gRPC", grpc_per_cpu)):
        record(
            "interop",
            f"one collector over {transport}, spans per CPU-second",
            per_cpu,
            "spans/CPU-s",
            aim="≥ the Collector's tail_sampling (issue 46)",
            floor=pass_per_cpu,
            floor_name="the Collector's pass-through",
            met=per_cpu >= anchor_per_cpu,
        )
    record(
        "interop",
        "one collector over OTLP/gRPC / over OTLP/HTTP (spans per CPU-second)",
        grpc_per_cpu / one_per_cpu,
        "x",
        aim="report",
    )


if __name__ == "__main__":
    main()
