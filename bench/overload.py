"""`spanbudget collect` under overload: what six clients that never wait get accepted,
against one client that honours `Retry-After`, side by side in one run.

Run: .venv/bin/python bench/overload.py [--seconds 10] [--quick]

Bodies of 400 whole 11-span traces (4,400 spans, about 1 MB of OTLP protobuf) go to a
collector with its default settings. The polite client sends the next body when the last
was accepted and sleeps `Retry-After` after a 503; each of the six impolite clients sends
again at once. Accepted spans per second (over the phase) and the collector's peak
resident memory are measured. The collector admits a request before decoding its body,
so a refusal costs it the read and nothing more: the impolite figure should stay close to
the polite one (the aim is 80 % or more). `--quick` runs each phase for 2 s: it checks
the bench runs, not its numbers.
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx
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
IMPOLITE = 6


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


class Phase:
    def __init__(self, url: str, bodies: Bodies, seconds: float) -> None:
        self.url = url
        self.bodies = bodies
        self.deadline = time.monotonic() + seconds
        self.accepted_spans = 0
        self.refused = 0
        self.lock = threading.Lock()

    def client(self, polite: bool) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            body = self.bodies.next()
            while time.monotonic() < self.deadline:
                response = client.post("/v1/traces", content=body, headers=PROTOBUF)
                if response.status_code == 200:
                    with self.lock:
                        self.accepted_spans += TRACES_PER_BODY * 11
                    body = self.bodies.next()
                    continue
                assert response.status_code == 503, response.status_code
                with self.lock:
                    self.refused += 1
                if polite:
                    time.sleep(float(response.headers.get("retry-after", "1")))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_phase(url: str, bodies: Bodies, seconds: float, clients: int, polite: bool) -> Phase:
    phase = Phase(url, bodies, seconds)
    threads = [threading.Thread(target=phase.client, args=(polite,)) for _ in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    phase.seconds = time.monotonic() - started  # type: ignore[attr-defined]
    return phase


def start_collector(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OTEL_SDK_DISABLED": "true"}
    command = [
        str(Path(sys.executable).with_name("spanbudget")),
        "collect",
        *("--listen", f"127.0.0.1:{port}"),
        *("--db", str(data / "verdicts.db")),
        *("--budget", str(REPO / "budget.yaml")),
    ]
    log = (data / "collector.log").open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("the collector did not start: see its log")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="each phase")
    parser.add_argument("--quick", action="store_true", help="2 s phases (CI)")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 2.0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, clients, polite, tag in (
            ("one client, honours Retry-After", 1, True, 1),
            (f"{IMPOLITE} clients, never wait", IMPOLITE, False, 2),
        ):
            data = Path(tmp) / str(tag)
            data.mkdir()
            process, url = start_collector(data)  # a fresh collector for each phase
            try:
                bodies = Bodies(tag)
                phase = run_phase(url, bodies, args.seconds, clients, polite)
                rss = peak_rss_mib(process.pid)
            finally:
                process.terminate()
                process.wait(30)
            rate = phase.accepted_spans / phase.seconds  # type: ignore[attr-defined]
            rows.append((name, rate, phase.refused, rss))
    table = Table(
        title=f"spanbudget collect under overload: bodies of {TRACES_PER_BODY * 11:,} spans,"
        f" {args.seconds:g} s per phase"
    )
    for column in ("clients", "accepted spans / s", "503s", "peak RSS MiB", "÷ polite"):
        table.add_column(column, justify="left" if column == "clients" else "right")
    polite_rate = rows[0][1]
    for name, rate, refused, rss in rows:
        table.add_row(
            name, f"{rate:,.0f}", f"{refused:,}", f"{rss:.0f}", f"{rate / polite_rate:.2f}"
        )
    Console(width=120).print(table)
    share = rows[1][1] / polite_rate
    record(
        "overload",
        f"accepted spans/s, {IMPOLITE} clients that never wait ÷ one polite client",
        share,
        "ratio",
        aim="≥ 0.80",
        met=share >= 0.80,
    )


if __name__ == "__main__":
    main()
