"""The real Collector's `otlp` exporter (OTLP/gRPC, the binary `make binaries` builds)
sending to `spanbudget collect`'s OTLP/gRPC listener: every trace judged as one collector
judges it over OTLP/HTTP; and with the budget collector's intake queue too small for a
burst, its refusals (`UNAVAILABLE` with `RetryInfo`) make the exporter back off and send
again, and nothing is lost."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from spanbudget.app.processes import Supervisor

from tests.support.servers import free_port, wait_until
from tests.support.traces import TraceBuilder

from .processes import Otelcol, all_verdicts, budget_collector, metric_total
from .traffic import SPANS_PER_TRACE, send, send_spans, split_requests, traffic

# The exporter as the shipped files set it up, on its own: OTLP/HTTP in, nothing between
# the receiver and the exporter (each request goes on as it came), OTLP/gRPC out. Its own
# back-off starts at 100 ms: a wait of a second or more is the budget collector's
# RetryInfo at work.
CONFIG = """
extensions:
  health_check:
    endpoint: "${env:OTELCOL_LISTEN_HOST}:${env:OTELCOL_HEALTH_PORT}"
receivers:
  otlp:
    protocols:
      http:
        endpoint: "${env:OTELCOL_LISTEN_HOST}:${env:OTELCOL_OTLP_HTTP_PORT}"
exporters:
  otlp_grpc/budget:
    endpoint: ${env:BUDGET_COLLECTOR_GRPC}
    compression: gzip
    tls:
      insecure: true
    retry_on_failure:
      enabled: true
      initial_interval: 100ms
      max_interval: 5s
      max_elapsed_time: 120s
    sending_queue:
      enabled: true
      num_consumers: 10
service:
  extensions: [health_check]
  telemetry:
    logs:
      sampling:
        enabled: false  # else it logs the first 10 alike lines a tick: every retry counts
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus:
                host: "${env:OTELCOL_LISTEN_HOST}"
                port: ${env:OTELCOL_METRICS_PORT}
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp_grpc/budget]
"""


@dataclass
class Exporter:
    """The Collector (`otelcol`) exporting to a budget collector over OTLP/gRPC (`url`), and
    a reference collector given the same traffic over OTLP/HTTP."""

    otelcol: Otelcol
    log: Path
    url: str
    reference: str

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=5).text


@contextmanager
def exporting(root: Path, **collector_env: str) -> Iterator[Exporter]:
    port, grpc_port, reference_port = free_port(), free_port(), free_port()
    config = root / "otelcol-grpc.yaml"
    config.write_text(CONFIG)
    otelcol = Otelcol(str(config), {"BUDGET_COLLECTOR_GRPC": f"127.0.0.1:{grpc_port}"})
    collector = budget_collector("budget", port, root, grpc_port=grpc_port)
    collector.env = {**collector.env, **collector_env}
    children = [
        collector,
        budget_collector("reference", reference_port, root),
        otelcol.child("otelcol", root),
    ]
    supervisor = Supervisor()
    try:
        for child in children:  # each once the one it sends to answers, as compose does
            supervisor.start(child)
            supervisor.wait_healthy(child, 120)
        yield Exporter(
            otelcol,
            root / "otelcol.log",
            f"http://127.0.0.1:{port}",
            f"http://127.0.0.1:{reference_port}",
        )
    finally:
        supervisor.stop_all()


def _comparable(verdict: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in verdict.items() if k != "evaluated_at"}


def test_the_collectors_otlp_exporter_over_grpc_gets_every_trace_judged_as_over_http(
    tmp_path: Path,
) -> None:
    sent = traffic(200, seed=40)
    with exporting(tmp_path) as stack, httpx.Client(timeout=10) as client:
        for request in split_requests(sent, per_request=10):  # children before parents
            send_spans(client, stack.otelcol.otlp_http, request)
            send_spans(client, stack.reference, request)
        wait_until(lambda: len(all_verdicts(stack.url)) == len(sent), "every verdict", 60)
        wait_until(lambda: len(all_verdicts(stack.reference)) == len(sent), "the reference", 60)
        over_grpc = all_verdicts(stack.url)
        over_http = all_verdicts(stack.reference)
        metrics = stack.metrics()
    assert set(over_grpc) == {trace.trace_id for trace in sent}
    assert {t: _comparable(v) for t, v in over_grpc.items()} == {
        t: _comparable(v) for t, v in over_http.items()
    }
    assert all(v["spans"] == SPANS_PER_TRACE for v in over_grpc.values())
    spans = len(sent) * SPANS_PER_TRACE
    assert metric_total(metrics, "spanbudget_intake_spans", transport="grpc") == spans
    assert metric_total(metrics, "spanbudget_intake_spans", transport="http") == 0
    assert metric_total(metrics, "spanbudget_intake_requests", transport="grpc") > 0


def _retry_waits_s(log: str) -> list[float]:
    """The waits the Collector's exporter logged ("Exporting failed. Will retry the request
    after interval."), in seconds."""
    waits = []
    for line in log.splitlines():
        if "Will retry the request after interval" in line:
            found = re.search(r'"interval": "([0-9.]+)(ms|s)"', line)
            assert found, line
            value, unit = float(found.group(1)), found.group(2)
            waits.append(value / 1000 if unit == "ms" else value)
    return waits


def test_a_burst_over_a_small_queue_backs_the_exporter_off_and_loses_nothing(
    tmp_path: Path,
) -> None:
    """600 traces at once in messages of 660 spans (decoded off the event loop, several at
    a time), ten in flight, into an intake queue of 700 spans: the budget collector
    refuses what does not fit with UNAVAILABLE and RetryInfo (1 s), the exporter waits
    that long and sends again, and every trace is judged once, whole. Whether two
    messages meet in the queue depends on how fast each is decoded: bursts are sent
    (each of new traces) until one did not fit, at most ten."""
    sent: list[TraceBuilder] = []
    batches: list[list[TraceBuilder]] = []
    refused = 0.0
    with (
        exporting(tmp_path, SPANBUDGET_COLLECTOR_INTAKE_QUEUE_SPANS="700") as stack,
        httpx.Client(timeout=10) as client,
        ThreadPoolExecutor(8) as pool,
    ):
        for burst in range(10):
            traces = traffic(600, seed=41 + burst)
            sent += traces
            burst_batches = [traces[i : i + 60] for i in range(0, len(traces), 60)]
            batches += burst_batches
            list(pool.map(lambda b: send(client, stack.otelcol.otlp_http, b), burst_batches))
            expected = len(sent)
            wait_until(
                lambda n=expected: len(all_verdicts(stack.url)) == n, "every verdict", 120, 1
            )
            refused = metric_total(
                stack.metrics(),
                "spanbudget_intake_requests",
                transport="grpc",
                outcome="queue_full",
            )
            if refused:
                break
        verdicts = all_verdicts(stack.url)
        metrics = stack.metrics()
        exporter = stack.otelcol.metrics()
    accepted = metric_total(
        metrics, "spanbudget_intake_requests", transport="grpc", outcome="accepted"
    )
    waits = _retry_waits_s(stack.log.read_text())
    sent_spans = metric_total(exporter, "otelcol_exporter_sent_spans")
    failed = metric_total(exporter, "otelcol_exporter_send_failed_spans")
    print(
        f"\nqueue full: {len(sent)} traces in {len(batches)} requests; {refused:.0f} refused"
        f" with RetryInfo, {accepted:.0f} accepted; the exporter waited {len(waits)} times,"
        f" {min(waits, default=0):.2f} to {max(waits, default=0):.2f} s; it sent"
        f" {sent_spans:.0f} spans, failed {failed:.0f}; judged {len(verdicts)}, each whole"
    )
    assert refused > 0  # the burst did not fit
    assert len(waits) >= refused  # every refusal was waited out ...
    assert min(waits) >= 1.0  # ... for RetryInfo's second, not the exporter's 100 ms
    assert accepted == len(batches)  # each request accepted once in the end
    assert failed == 0
    assert sent_spans == len(sent) * SPANS_PER_TRACE
    assert set(verdicts) == {trace.trace_id for trace in sent}
    assert all(v["spans"] == SPANS_PER_TRACE and not v["late_spans"] for v in verdicts.values())
