"""`spanbudget collect` under overload: six clients that never wait against one that
honours `Retry-After`, measured against that polite client alone, over OTLP/HTTP and over
OTLP/gRPC.

Run: .venv/bin/python bench/overload.py [--seconds 26] [--warmup 5] [--transport both]
     [--quick]

Bodies of 400 whole 11-span traces (4,400 spans, about 1 MB of OTLP protobuf) go to a
collector with its default settings, a fresh one for each phase. The polite client sends
the next body when the last was accepted and waits `Retry-After` (gRPC: `RetryInfo`)
after a refusal; each impolite client sends again at once. The first phase is the polite
client alone; the second adds the six impolite ones. The figure is the collector's
accepted spans per second from the end of the warm-up to the end of the phase (by default
the 6th to the 26th second), the second phase's over the first's: a refusal that costs the
collector nothing leaves it at 1 (the aim is 0.90 or more). Also shown: the refusals, the
polite client's own share, connections reset instead of answered, the collector's CPU in
the window, the traces it dropped unjudged (accepted, then evicted from a full assembly
buffer: accepted spans the judging could not keep up with) and its peak resident memory.
`--quick` runs each phase for 3 s: it checks the bench runs, not its numbers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import grpc
import httpx
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from rich.console import Console
from rich.table import Table

from tests.support.otlp import to_request
from tests.support.servers import free_port
from tests.support.traces import rag_trace

sys.path.insert(0, str(REPO / "bench"))
from bench_summary import record

PROTOBUF = {"Content-Type": "application/x-protobuf"}
TRACES_PER_BODY = 400
SPANS_PER_BODY = TRACES_PER_BODY * 11
IMPOLITE = 6
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
AIM = 0.90


class Bodies:
    """An endless supply of distinct bodies: one template, new trace ids per body."""

    def __init__(self, tag: int) -> None:
        spans = [
            s for i in range(TRACES_PER_BODY) for s in rag_trace(trace_id=f"{i + 1:032x}").spans
        ]
        self.template = to_request(spans)
        self.tag = tag
        self._numbers = itertools.count()
        self._lock = threading.Lock()

    def next(self) -> bytes:
        with self._lock:
            n = next(self._numbers)
        request = ExportTraceServiceRequest()
        request.CopyFrom(self.template)
        prefix = (self.tag << 56 | n << 16).to_bytes(8, "big")
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    span.trace_id = prefix + span.trace_id[8:]
        return bytes(request.SerializeToString())


# One export: "accepted", or ("refused", seconds to wait), or ("reset", None) for a
# connection that ended without an answer.
Outcome = tuple[str, float | None]
Sender = Callable[[bytes], Outcome]


@dataclass
class Phase:
    bodies: Bodies
    deadline: float
    accepted: list[tuple[float, bool]] = field(default_factory=list)  # (when, polite)
    refused: int = 0
    reset: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, send: Sender, polite: bool) -> None:
        body = self.bodies.next()
        while time.monotonic() < self.deadline:
            outcome, wait = send(body)
            if outcome == "accepted":
                with self.lock:
                    self.accepted.append((time.monotonic(), polite))
                body = self.bodies.next()
                continue
            with self.lock:
                if outcome == "refused":
                    self.refused += 1
                else:
                    self.reset += 1
            if polite:
                time.sleep(wait if wait is not None else 1.0)

    def spans(self, start: float, end: float, polite_only: bool = False) -> int:
        return SPANS_PER_BODY * sum(
            1
            for when, polite in self.accepted
            if start <= when < end and (polite or not polite_only)
        )


def http_sender(url: str) -> tuple[Sender, Callable[[], None]]:
    client = httpx.Client(base_url=url, timeout=60)

    def send(body: bytes) -> Outcome:
        try:
            response = client.post("/v1/traces", content=body, headers=PROTOBUF)
        except httpx.TransportError:
            return "reset", None
        if response.status_code == 200:
            return "accepted", None
        assert response.status_code == 503, response.status_code
        return "refused", float(response.headers.get("retry-after", "1"))

    return send, client.close


def grpc_sender(address: str) -> tuple[Sender, Callable[[], None]]:
    # A connection of its own, as six separate clients would have.
    channel = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
    export = channel.unary_unary(EXPORT)

    def send(body: bytes) -> Outcome:
        try:
            export(body, timeout=60)
        except grpc.RpcError as exc:
            code = exc.code()  # type: ignore[attr-defined]
            if code is not grpc.StatusCode.UNAVAILABLE:
                raise
            return ("refused", _retry_delay(exc)) if _retry_delay(exc) else ("reset", None)
        return "accepted", None

    return send, channel.close


def _retry_delay(error: grpc.RpcError) -> float | None:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return None


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def traces_dropped(url: str) -> int:
    """Traces the collector dropped unjudged so far, whatever the reason (its /metrics)."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return round(
        sum(
            float(line.rpartition(" ")[2])
            for line in text.splitlines()
            if line.startswith("spanbudget_traces_dropped_total{")
        )
    )


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Result:
    transport: str
    clients: str
    rate: float  # the collector's accepted spans/s in the window
    polite_rate: float  # of which the polite client's
    refused: int
    reset: int
    cpu: float  # the collector's CPU-seconds per second in the window
    rss: float
    dropped: int  # traces dropped unjudged (accepted, then evicted): over the whole phase


def run_phase(
    transport: str, impolite: int, seconds: float, warmup: float, tag: int, data: Path
) -> Result:
    process, url, grpc_address = start_collector(data, grpc=transport == "grpc")
    try:
        target = grpc_address if transport == "grpc" else url
        make = grpc_sender if transport == "grpc" else http_sender
        senders = [make(target) for _ in range(1 + impolite)]
        started = time.monotonic()
        phase = Phase(Bodies(tag), started + seconds)
        threads = [
            threading.Thread(target=phase.client, args=(send, n == 0))
            for n, (send, _) in enumerate(senders)
        ]
        for thread in threads:
            thread.start()
        time.sleep(max(0.0, started + warmup - time.monotonic()))
        cpu_start = cpu_seconds(process.pid)
        time.sleep(max(0.0, started + seconds - time.monotonic()))
        cpu = cpu_seconds(process.pid) - cpu_start
        for thread in threads:
            thread.join()
        for _, close in senders:
            close()
        rss = peak_rss_mib(process.pid)
        dropped = traces_dropped(url)
    finally:
        process.terminate()
        process.wait(30)
    window = (started + warmup, started + seconds)
    length = seconds - warmup
    return Result(
        transport,
        f"{impolite} never wait + 1 polite" if impolite else "1 polite, alone",
        phase.spans(*window) / length,
        phase.spans(*window, polite_only=True) / length,
        phase.refused,
        phase.reset,
        cpu / length,
        rss,
        dropped,
    )


def start_collector(data: Path, grpc: bool) -> tuple[subprocess.Popen[bytes], str, str]:
    port = free_port()
    grpc_address = f"127.0.0.1:{free_port()}" if grpc else "off"
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OTEL_SDK_DISABLED": "true"}
    command = [
        str(Path(sys.executable).with_name("spanbudget")),
        "collect",
        *("--listen", f"127.0.0.1:{port}"),
        *("--grpc-listen", grpc_address),
        *("--db", str(data / "verdicts.db")),
        *("--budget", str(REPO / "budget.yaml")),
    ]
    log = (data / "collector.log").open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url, grpc_address
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("the collector did not start: see its log")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=26.0, help="each phase")
    parser.add_argument("--warmup", type=float, default=5.0, help="left out of the figure")
    parser.add_argument("--transport", choices=("http", "grpc", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="3 s phases (CI)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup = 3.0, 1.0
    transports = ("http", "grpc") if args.transport == "both" else (args.transport,)
    results: list[Result] = []
    tags = itertools.count(1)
    with tempfile.TemporaryDirectory() as tmp:
        for transport in transports:
            for impolite in (0, IMPOLITE):
                data = Path(tmp) / str(next(tags))
                data.mkdir()
                results.append(
                    run_phase(transport, impolite, args.seconds, args.warmup, int(data.name), data)
                )
    table = Table(
        title=f"spanbudget collect under overload: bodies of {SPANS_PER_BODY:,} spans,"
        f" accepted spans/s from {args.warmup:g} s to {args.seconds:g} s of each phase"
    )
    columns = (
        "transport",
        "clients",
        "accepted spans/s",
        "the polite one's",
        "refusals",
        "resets",
        "collector CPU",
        "traces dropped",
        "peak RSS MiB",
        "÷ polite alone",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in columns[:2] else "right")
    for transport in transports:
        alone, crowded = (r for r in results if r.transport == transport)
        for result in (alone, crowded):
            table.add_row(
                transport,
                result.clients,
                f"{result.rate:,.0f}",
                f"{result.polite_rate:,.0f}",
                f"{result.refused:,}",
                f"{result.reset:,}",
                f"{result.cpu:.0%}",
                f"{result.dropped:,}",
                f"{result.rss:.0f}",
                f"{result.rate / alone.rate:.2f}" if alone.rate else "-",
            )
        share = crowded.rate / alone.rate if alone.rate else 0.0
        record(
            "overload",
            f"OTLP/{transport.upper()}: accepted spans/s, {IMPOLITE} clients that never wait"
            " and one polite ÷ the polite one alone",
            share,
            "ratio",
            aim=f"≥ {AIM:.2f}",
            met=share >= AIM,
        )
    console = Console(width=200)
    console.print(table)
    if any(result.dropped for result in results):
        console.print(
            "Traces were dropped unjudged: the collector accepted spans faster than it"
            " judged them, so its accepted spans/s overstate what it did with them."
        )


if __name__ == "__main__":
    main()
