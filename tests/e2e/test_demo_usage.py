"""`spanbudget demo` refuses bad input with exit 2 and a message, before starting anything,
and its closing lines say what to look at and how long retrieval waited for CPU."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from spanbudget.app.cli import app
from spanbudget.app.demo import DemoSettings, retrieval_waits, stack_of, what_to_look_at
from spanbudget.app.stack import JAEGER_CONFIG
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.loadtest.client import RequestRecord
from spanbudget.collector.loadtest.files import write_results
from spanbudget.collector.loadtest.records import RequestResult
from spanbudget.collector.loadtest.report import build_report
from typer.testing import CliRunner

from tests.support.collector import running_collector
from tests.support.otlp import to_request
from tests.support.reports import INFO, make_results
from tests.support.traces import T0_NS, rag_trace

REPO = Path(__file__).resolve().parents[2]
PROTOBUF = "application/x-protobuf"
MS = 1_000_000


def test_demo_with_an_invalid_budget_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    budget = tmp_path / "budget.yaml"
    budget.write_text("version: 1\n")
    data = tmp_path / "data"
    result = CliRunner().invoke(
        app, ["demo", "--exit", "--budget", str(budget), "--data-dir", str(data)]
    )
    assert result.exit_code == 2, result.output
    assert "budget.yaml" in result.output
    assert not data.exists()  # no ingest, no children


def test_demo_with_a_bad_duration_exits_2(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = CliRunner().invoke(
        app, ["demo", "--exit", "--duration", "soon", "--data-dir", str(data)]
    )
    assert result.exit_code == 2, result.output
    assert "--duration" in result.output
    assert not data.exists()


def test_what_to_look_at_reads_the_report_the_load_test_writes() -> None:
    """The hint reads the report the load test writes (a renamed field fails here), phase
    by phase, and names a p95 only where the phase had requests enough to bound one."""
    budget = load_budget(REPO / "budget.yaml").budget
    report = build_report(make_results(budget, count=160), budget, INFO)
    nominal, burst = report.phases
    assert (nominal.requests, burst.name, burst.requests) == (40, "burst", 120)
    burst = replace(burst, stage_p95_ms={**burst.stage_p95_ms, "retrieval": 61.0})  # over 40
    said = what_to_look_at(replace(report, phases=(nominal, burst)))
    assert said.startswith(f"nominal {nominal.within_limits:.0%} within limits (SLO ")
    assert "too few requests for a p95; burst " in said
    assert "retrieval p95 61 ms > 40" in said
    assert what_to_look_at(None).startswith("the logs")


def test_the_demo_says_how_long_retrieval_waited_for_cpu(tmp_path: Path) -> None:
    # Two requests of the nominal phase, one of the burst, as the load test writes them;
    # within its 14 ms embeddings span, the burst's query waited 8 ms for a model call and
    # 5 ms for the event loop.
    shapes = {"1": ("nominal", 0, 0), "2": ("nominal", 2, 1), "3": ("burst", 8, 5)}
    spans = []
    for n, (_, queue_ms, loop_ms) in shapes.items():
        trace = rag_trace(trace_id=f"{int(n):032x}")
        embeddings = next(s for s in trace.spans if s.name.startswith("embeddings "))
        start_ms, end_ms = ((t - T0_NS) / MS for t in (embeddings.start_ns, embeddings.end_ns))
        trace.add("embeddings.queue", start_ms, start_ms + queue_ms, parent=embeddings.span_id)
        trace.add("embeddings.loop_wait", end_ms - loop_ms, end_ms, parent=embeddings.span_id)
        spans += trace.spans
    csv_path = tmp_path / "requests.csv"
    records = [
        RequestResult(RequestRecord(int(n), phase, 0.0, trace_id=f"{int(n):032x}"))
        for n, (phase, _, _) in shapes.items()
    ]
    write_results(csv_path, load_budget(REPO / "budget.yaml").budget.stage_names(), records)
    with running_collector(tmp_path) as collector:
        assert collector.post(to_request(spans).SerializeToString(), PROTOBUF).status_code == 200
        for n in shapes:
            collector.verdict(f"{int(n):032x}")
        said = retrieval_waits(collector.url, "run-1", csv_path)
        assert retrieval_waits(collector.url, "another-run", csv_path) == ""
    nominal, burst = said.split("; ")
    assert nominal == (
        "nominal: 1.9 ms for a model call (embeddings.queue), "  # p95 of 0 and 2
        "0.9 ms for the gateway's event loop (embeddings.loop_wait)"
    )
    assert burst == (
        "burst: 8.0 ms for a model call (embeddings.queue), "
        "5.0 ms for the gateway's event loop (embeddings.loop_wait)"
    )


def test_demo_with_jaeger_starts_it_first_and_forwards_every_trace_to_it(tmp_path: Path) -> None:
    """`demo --jaeger BINARY`: Jaeger starts before the collector, on its own ports (not the
    collector's 4318), with the packaged deploy/jaeger.yaml; the collector forwards to it
    and links its web UI to it. tests/deploy/test_jaeger.py runs this stack for real."""
    binary = tmp_path / "jaeger"
    settings = DemoSettings(jaeger=binary, data_dir=tmp_path)
    jaeger, collector, *_ = stack_of(settings, REPO / "budget.yaml").children()
    assert jaeger.name == "jaeger"
    assert list(jaeger.argv) == [str(binary), "--config", str(JAEGER_CONFIG)]
    assert JAEGER_CONFIG.read_bytes() == (REPO / "deploy" / "jaeger.yaml").read_bytes()
    assert jaeger.env["JAEGER_LISTEN_HOST"] == "127.0.0.1"
    assert jaeger.env["JAEGER_OTLP_HTTP_PORT"] != settings.collector.rpartition(":")[2]
    argv = list(collector.argv)
    forward = argv[argv.index("--forward-otlp") + 1]
    assert forward == f"http://127.0.0.1:{jaeger.env['JAEGER_OTLP_HTTP_PORT']}/v1/traces"
    assert argv[argv.index("--jaeger-ui") + 1] == "http://127.0.0.1:16686"
    assert argv[argv.index("--jaeger-url") + 1] == "http://127.0.0.1:16686"
    without = stack_of(DemoSettings(data_dir=tmp_path), REPO / "budget.yaml").children()
    assert [child.name for child in without] == ["collector", "engine", "gateway"]


def test_demo_with_a_missing_jaeger_binary_exits_2(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = CliRunner().invoke(
        app, ["demo", "--exit", "--jaeger", str(tmp_path / "nope"), "--data-dir", str(data)]
    )
    assert result.exit_code == 2, result.output
    assert "--jaeger" in result.output
    assert not data.exists()
