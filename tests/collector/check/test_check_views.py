"""`check`'s views over many traces: the worst first and at most `--rows` of them, every
stage's percentiles and the SLO line with its interval (as `loadtest` prints a run), 80
columns on a narrow terminal with ids kept apart, and JUnit XML for a CI's test view."""

from __future__ import annotations

import io
import json
import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console
from spanbudget.app.cli import app
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.check import evaluate_spans
from spanbudget.collector.check.render import render_table, short_ids
from spanbudget.collector.spans import SpanKind
from spanbudget.collector.stats import percentile, wilson_interval
from typer.testing import CliRunner

from tests.support.otlp import to_otlp_json
from tests.support.traces import TraceBuilder, openlit_stream_without_http_child, rag_trace

REPO = Path(__file__).resolve().parents[3]
BUDGET = str(REPO / "budget.yaml")
runner = CliRunner()


def _traces(n: int, seed: int = 5) -> list[tuple[str, dict[str, float]]]:
    """n traces with random trace ids; retrieval and prefill vary, some over their limits."""
    rng = random.Random(seed)
    return [
        (
            f"{rng.getrandbits(128):032x}",
            {"retrieval": rng.uniform(0, 30), "prefill": rng.uniform(0, 30)},
        )
        for _ in range(n)
    ]


def _write(path: Path, traces: list[tuple[str, dict[str, float]]]) -> Path:
    path.write_text(
        "".join(
            to_otlp_json(rag_trace(trace_id=tid, **extra).spans).replace("\n", "") + "\n"
            for tid, extra in traces
        )
    )
    return path


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("many") / "traces.jsonl", _traces(120))


def _json(path: Path) -> list[dict]:
    result = runner.invoke(app, ["check", str(path), "--budget", BUDGET, "--format", "json"])
    return json.loads(result.stdout)


def test_rows_are_the_worst_first_and_at_most_rows(many: Path) -> None:
    verdicts = _json(many)
    severity = {"ok": 0, "warn": 1, "overrun": 2, "incomplete": 3, "error": 4}
    worst = sorted(verdicts, key=lambda v: (-severity[v["status"]], -v["ttft_ms"]))[:7]
    out = runner.invoke(app, ["check", str(many), "--budget", BUDGET, "--rows", "7"]).stdout
    shown = re.findall(r"^([0-9a-f]{32}) ", out, flags=re.MULTILINE)
    assert shown == [v["trace_id"] for v in worst]
    assert "113 more traces not shown" in out
    none = runner.invoke(app, ["check", str(many), "--budget", BUDGET, "--rows", "0"]).stdout
    assert re.findall(r"^[0-9a-f]{32} ", none, flags=re.MULTILINE) == []
    assert "120 more traces not shown" in none


def test_the_aggregate_is_each_stages_percentiles_and_the_slo_with_its_interval(
    many: Path,
) -> None:
    verdicts = _json(many)
    out = " ".join(
        runner.invoke(app, ["check", str(many), "--budget", BUDGET, "--rows", "0"]).stdout.split()
    )
    for name in ("retrieval", "prefill"):
        times = sorted(s["ms"] for v in verdicts for s in v["stages"] if s["name"] == name)
        over = sum(
            1
            for v in verdicts
            for s in v["stages"]
            if s["name"] == name and s["status"] == "overrun"
        )
        p50, p90, p95 = (percentile(times, q) for q in (50, 90, 95))
        row = f"{name} {{}} {{}} {p50:.1f} {p90:.1f} {p95:.1f} few {times[-1]:.1f} {over / 120:.1%}"
        assert re.search(row.format(r"\d+", r"\d+").replace(".", r"\."), out), name
    within = sum(1 for v in verdicts if v["status"] in ("ok", "warn"))
    low, high = wilson_interval(within, 120)
    assert f"{within} of 120 traces within every limit, {within / 120:.1%}" in out
    assert f"(95% interval {low:.1%}–{high:.1%}, Wilson)" in out
    assert "p99 299" in out  # what `few` stands for is said under the table


def _narrow(trace_ids: list[str]) -> list[str]:
    budget = load_budget(REPO / "budget.yaml").budget
    spans = []
    for trace_id in trace_ids:  # over three limits: three stages to blame
        spans += rag_trace(trace_id=trace_id, gateway=9, retrieval=30, prefill=30).spans
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True, color_system=None)
    render_table(evaluate_spans(spans, budget), budget, console)
    return out.getvalue().splitlines()


def test_a_narrow_terminal_gets_80_columns_and_ids_kept_apart() -> None:
    """Ids that share their first 8 characters get longer prefixes; ids that share a long
    prefix (test data, some exporters) show their ends; blame keeps to one line."""
    lines = _narrow(["abcdef01" + "1" * 24, "abcdef01" + "2" * 24, "0123456789abcdef" * 2])
    assert max(len(line) for line in lines) <= 80
    for shown in ("abcdef011 ", "abcdef012 ", "012345678 "):
        assert any(line.startswith(shown) for line in lines), shown
    assert sum(bool(re.search(r" (retrieval|prefill) \+2 *$", line)) for line in lines) == 3
    lines = _narrow([f"{i + 1:032x}" for i in range(3)])
    assert max(len(line) for line in lines) <= 80
    for shown in ("…00000001 ", "…00000003 "):
        assert any(line.startswith(shown) for line in lines), shown


def test_short_ids() -> None:
    assert short_ids(["a" * 32], 200) == {"a" * 32: "a" * 32}
    assert short_ids(["1234567890", "1234567899"], 80) == {
        "1234567890": "1234567890",
        "1234567899": "1234567899",
    }
    assert short_ids(["ab", "cd"], 80) == {"ab": "ab", "cd": "cd"}


def test_junit_xml_is_a_case_per_trace_failing_as_the_exit_code_does(
    many: Path, tmp_path: Path
) -> None:
    verdicts = {v["trace_id"]: v for v in _json(many)}
    bad = tmp_path / "in"
    bad.mkdir()
    (bad / "a.jsonl").write_bytes(many.read_bytes())
    (bad / "b.json").write_text("{not json")
    report = tmp_path / "check.xml"
    result = runner.invoke(
        app, ["check", str(bad), "--budget", BUDGET, "--rows", "0", "--junit", str(report)]
    )
    assert result.exit_code == 2  # the unreadable file
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    failed = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    overruns = {t for t, v in verdicts.items() if v["status"] == "overrun"}
    assert set(failed) == overruns
    assert overruns
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        str(len(verdicts) + 1),
        str(len(overruns)),
        "1",
    )
    errors = [c.find("error") for c in cases if c.find("error") is not None]
    assert len(errors) == 1
    assert "b.json" in (errors[0].get("message") or "")
    trace_id, failure = next(iter(failed.items()))
    verdict = verdicts[trace_id]
    stage = next(s for s in verdict["stages"] if s["name"] == verdict["blame"][0])
    assert f"blame {stage['name']} {stage['ms']:.1f} ms > {stage['limit_ms']:g}" in (
        failure.get("message") or ""
    )
    warn_only = tmp_path / "warn.xml"
    runner.invoke(
        app,
        ["check", str(many), "--budget", BUDGET, "--fail-on", "never", "--junit", str(warn_only)],
    )
    assert ET.parse(warn_only).getroot().find("testsuite").get("failures") == "0"  # type: ignore[union-attr]


def test_a_few_traces_leave_the_slo_undecided(tmp_path: Path) -> None:
    """One overrun in 17: 94.1 %, which says nothing about a 95 % objective either way."""
    traces = _traces(17, seed=1)
    traces = [(tid, {}) for tid, _ in traces[:16]] + [(traces[16][0], {"prefill": 30})]
    path = _write(tmp_path / "t.jsonl", traces)
    out = runner.invoke(app, ["check", str(path), "--budget", BUDGET])
    text = " ".join(out.stdout.split())
    assert "SLO: not decided — 16 of 17 traces within every limit, 94.1%" in text
    assert "too few traces to tell it from the objective" in text


def test_the_worst_overruns_say_what_the_request_asked(tmp_path: Path) -> None:
    """Under the rows, each of the worst overruns: its blamed stage's excess and the prompt's
    tokens from the engine's span; the JSON verdicts carry them too."""
    path = _write(tmp_path / "t.jsonl", [("c" * 32, {"prefill": 60.0}), ("d" * 32, {})])
    result = runner.invoke(app, ["check", str(path), "--budget", BUDGET])
    assert result.exit_code == 1
    reasons = result.stdout.split("the worst overruns' context")[1].splitlines()[1:2]
    prefill = next(s for s in _json(path)[0]["stages"] if s["name"] == "prefill")
    excess = prefill["ms"] - prefill["limit_ms"]
    assert reasons == [f"  {'c' * 32}  prefill +{excess:.1f} ms: 512-token prompt"]
    assert {v["attributes"]["gen_ai.usage.input_tokens"] for v in _json(path)} == {512}


def _streamed_through_a_server(host: str | None) -> str:
    """A chat call whose server (another service) streams on 1 ms past the client's span,
    on one clock: rule 3a centres such a child when the two are on different hosts."""
    trace = TraceBuilder()
    root = trace.add("handle question", 0, 100, service="app", host=host)
    chat = trace.add(
        "chat m", 3, 97, parent=root, kind=SpanKind.CLIENT, service="app", host=host,
        attributes={"gen_ai.operation.name": "chat"}, scope="opentelemetry.util.genai.handler",
    )  # fmt: skip
    server = trace.add(
        "POST /v1/chat/completions", 10, 98, parent=chat, kind=SpanKind.SERVER,
        service="llm", host=host,
    )  # fmt: skip
    for at in (45, 50):
        trace.add(
            "POST /v1/chat/completions http send", at, at + 0.01, parent=server,
            service="llm", host=host, attributes={"asgi.event.type": "http.response.body"},
        )  # fmt: skip
    return to_otlp_json(trace.spans)


@pytest.mark.parametrize("host", [None, "box-1"])
def test_skew_between_services_with_no_host_is_shown_with_its_remedy(
    tmp_path: Path, host: str | None
) -> None:
    path = tmp_path / "trace.json"
    path.write_text(_streamed_through_a_server(host))
    result = runner.invoke(app, ["check", str(path), "--budget", BUDGET])
    shown = " ".join(result.stdout.split())
    verdict = json.loads(
        runner.invoke(app, ["check", str(path), "--budget", BUDGET, "--format", "json"]).stdout
    )[0]
    if host is None:
        # app and llm stand in for hosts: the server is centred in its caller, 4 ms early.
        assert verdict["skew_adjusted_ms"] == 4.0
        assert verdict["ttft_ms"] == 41.0
        assert "1 trace(s) had spans shifted for clock skew (up to 4.00 ms)" in shown
        assert "host.name" in shown
    else:
        assert verdict["skew_adjusted_ms"] == 0.0
        assert verdict["ttft_ms"] == 45.0  # the first body send, where it happened
        assert "clock skew" not in shown


def test_first_tokens_that_are_estimates_are_counted_in_the_summary(tmp_path: Path) -> None:
    # OpenLIT without its HTTP child: its value counts from the chat span's start.
    trace = openlit_stream_without_http_child()
    path = tmp_path / "openlit.json"
    path.write_text(to_otlp_json(trace.spans))
    shown = " ".join(runner.invoke(app, ["check", str(path)]).stdout.split())
    assert "1 first token(s) are estimates (first_token.exact: false)" in shown
    exact = tmp_path / "exact.json"
    exact.write_text(_streamed_through_a_server("box-1"))
    assert "estimates" not in runner.invoke(app, ["check", str(exact)]).stdout


def test_a_budget_that_judged_only_traces_with_no_llm_call_gets_no_section(
    tmp_path: Path,
) -> None:
    # An OpenLIT app's stream, and its model list traced only by the HTTP instrumentation:
    # recognised as no library, judged by budget.yaml, not_applicable.
    stream = openlit_stream_without_http_child()
    models = TraceBuilder(trace_id="6" * 32)
    models.add("GET", 0, 3, kind=SpanKind.CLIENT, service="app")
    path = tmp_path / "traces.jsonl"
    path.write_text(to_otlp_json(stream.spans) + "\n" + to_otlp_json(models.spans) + "\n")
    verdicts = json.loads(
        runner.invoke(app, ["check", str(path), "--budget", BUDGET, "--format", "json"]).stdout
    )
    assert sorted(v["budget"] for v in verdicts) == ["openlit-ttft", "rag-ttft"]
    shown = runner.invoke(app, ["check", str(path), "--budget", BUDGET]).stdout
    assert "budget openlit-ttft" in shown
    assert "budget rag-ttft: TTFT" not in shown  # no section; the count and the line below
    assert "1 not applicable" in shown
