"""deploy/otelcol.yaml run by the real Collector in front of a budget collector and a real
Jaeger, on known traffic: the tail sampler keeps exactly what its policy says (every
overrun and error, and the probabilistic share of the rest, computed here as the sampler
computes it), and its span_metrics connector and spanbudget's stages measure the same
traffic side by side (the table in docs/deployment.md)."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from spanbudget.app.processes import Supervisor

from tests.support.binaries import go_binary
from tests.support.servers import ServerThread, free_port, read_asgi_body, wait_until
from tests.support.stack import jaeger_on_free_ports
from tests.support.traces import TraceBuilder

from .processes import Otelcol, all_verdicts, budget_collector
from .traffic import send, traffic

SAMPLE_PERCENT = 25
STAGES = ("network", "gateway", "retrieval", "prompt", "prefill")


def tail_sampler_keeps_by_share(trace_id: str, percent: int) -> bool:
    """The contrib tail sampler's probabilistic policy: FNV-1a 64 of its default salt and
    the trace id's 16 bytes, kept at or under MaxUint64 times the ratio (probabilistic.go)."""
    digest = 0xCBF29CE484222325
    for byte in b"default-hash-seed" + bytes.fromhex(trace_id):
        digest = ((digest ^ byte) * 0x100000001B3) % 2**64
    return digest <= int((2**64 - 1) * Fraction(percent, 100))


@dataclass
class MetricsSink:
    """An OTLP/HTTP metrics endpoint that keeps what the Collector exports to it."""

    requests: list[ExportMetricsServiceRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        body = await read_asgi_body(receive)
        if (b"content-encoding", b"gzip") in scope["headers"]:  # the exporter's default
            body = gzip.decompress(body)
        request = ExportMetricsServiceRequest.FromString(body)
        with self.lock:
            self.requests.append(request)
        headers = [(b"content-type", b"application/x-protobuf")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        answer = ExportMetricsServiceResponse().SerializeToString()
        await send({"type": "http.response.body", "body": answer})

    def durations(self) -> dict[tuple[str, str], tuple[int, float]]:
        """(service, span name) -> (count, sum in ms) of the latest cumulative point."""
        latest: dict[tuple[str, str], tuple[int, float]] = {}
        with self.lock:
            requests = list(self.requests)
        for request in requests:
            for resource in request.resource_metrics:
                service = next(
                    a.value.string_value
                    for a in resource.resource.attributes
                    if a.key == "service.name"
                )
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        if metric.name != "traces.span.metrics.duration":
                            continue
                        for point in metric.histogram.data_points:
                            name = next(
                                a.value.string_value
                                for a in point.attributes
                                if a.key == "span.name"
                            )
                            latest[(service, name)] = (point.count, point.sum)
        return latest


@dataclass
class Front:
    collector: str
    front: Otelcol
    jaeger: str
    sink: MetricsSink


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    root = tmp_path_factory.mktemp("otelcol")
    jaeger = jaeger_on_free_ports(go_binary("jaeger"))
    sink = MetricsSink()
    port = free_port()
    with ServerThread(sink) as metrics_server:
        otelcol = Otelcol(
            "otelcol.yaml",
            {
                "BUDGET_COLLECTOR_ENDPOINT": f"http://127.0.0.1:{port}",
                "JAEGER_OTLP_ENDPOINT": f"127.0.0.1:{jaeger.otlp_grpc_port}",
                "BUDGET_SAMPLE_PERCENT": str(SAMPLE_PERCENT),
                "SPANMETRICS_OTLP_ENDPOINT": f"http://127.0.0.1:{metrics_server.port}/v1/metrics",
                "SPANMETRICS_FLUSH_INTERVAL": "1s",
            },
        )
        children = [
            jaeger.child(root / "jaeger.log"),
            budget_collector("budget", port, root, "--forward-otlp", otelcol.annotated),
            otelcol.child("otelcol", root),
        ]
        supervisor = Supervisor()
        try:
            for child in children:
                supervisor.start(child)
            for child in children:
                supervisor.wait_healthy(child, 120)
            yield Front(f"http://127.0.0.1:{port}", otelcol, jaeger.query_url, sink)
        finally:
            supervisor.stop_all()


@pytest.fixture(scope="module")
def sent(front: Front) -> list[TraceBuilder]:
    """400 traces through the Collector's intake, every one judged."""
    traces = traffic(400, seed=36)
    with httpx.Client(timeout=10) as client:
        for start in range(0, len(traces), 20):
            send(client, front.front.otlp_http, traces[start : start + 20])
    wait_until(
        lambda: len(all_verdicts(front.collector)) == len(traces), "every verdict", timeout=60
    )
    return traces


def test_tail_sampling_keeps_violations_and_the_policy_share_of_the_rest(
    front: Front, sent: list[TraceBuilder]
) -> None:
    verdicts = all_verdicts(front.collector)
    violations = {t for t, v in verdicts.items() if v["status"] in ("overrun", "error")}
    shared = {t.trace_id for t in sent if tail_sampler_keeps_by_share(t.trace_id, SAMPLE_PERCENT)}
    expected = violations | shared
    rest = len(sent) - len(violations)
    assert violations
    assert 0 < len(shared - violations) < rest  # the share keeps some of the rest, not all
    with httpx.Client(timeout=10) as client:

        def in_jaeger() -> set[str]:
            return {
                t.trace_id
                for t in sent
                if client.get(f"{front.jaeger}/api/traces/{t.trace_id}").status_code == 200
            }

        wait_until(
            lambda: in_jaeger() >= expected, "the kept traces in Jaeger", timeout=30, every=1
        )
        assert in_jaeger() == expected
    print(
        f"\ntail sampling at {SAMPLE_PERCENT} %: {len(sent)} traces, {len(violations)} overrun or "
        f"error (all kept), {len(shared - violations)} of the other {rest} kept by share, "
        f"{len(expected)} in Jaeger"
    )


def test_span_metrics_and_spanbudget_side_by_side(front: Front, sent: list[TraceBuilder]) -> None:
    durations: dict[tuple[str, str], list[float]] = {}
    for trace in sent:
        for span in trace.spans:
            ms = (span.end_ns - span.start_ns) / 1e6
            durations.setdefault((span.service, span.name), []).append(ms)
    wait_until(
        lambda: (
            {k: v[0] for k, v in front.sink.durations().items()}
            == {k: len(v) for k, v in durations.items()}
        ),
        "span_metrics over every span",
        timeout=30,
    )
    measured = front.sink.durations()
    for key, values in durations.items():  # the connector measured what was sent
        count, total = measured[key]
        assert total / count == pytest.approx(sum(values) / len(values), abs=0.01), key

    verdicts = list(all_verdicts(front.collector).values())
    stage_mean = {
        stage: sum(next(s["ms"] for s in v["stages"] if s["name"] == stage) for v in verdicts)
        / len(verdicts)
        for stage in STAGES
    }
    ttft_mean = sum(v["ttft_ms"] for v in verdicts) / len(verdicts)
    span_mean = {key: total / count for key, (count, total) in measured.items()}
    # Exclusive shares add up to the time to first token; inclusive durations do not.
    assert sum(stage_mean.values()) == pytest.approx(ttft_mean, abs=0.5)
    assert sum(span_mean.values()) > 3 * ttft_mean
    lines = [f"{'span (span_metrics, inclusive)':48} {'mean ms':>8}"]
    lines += [f"{service + ' ' + name:48} {ms:8.1f}" for (service, name), ms in span_mean.items()]
    lines += [f"{'stage (spanbudget, exclusive TTFT share)':48} {'mean ms':>8}"]
    lines += [f"{stage:48} {ms:8.1f}" for stage, ms in stage_mean.items()]
    lines += [f"{'time to first token':48} {ttft_mean:8.1f}"]
    print("\n" + "\n".join(lines))
