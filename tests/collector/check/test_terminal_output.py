"""Off a terminal (CI logs, `| tee`, files) no number is cut and help reads as paragraphs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table
from spanbudget.app.cli import app
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.loadtest.render_terminal import render_terminal
from spanbudget.collector.loadtest.report import build_report
from spanbudget.common.terminal import HELP_WIDTH, make_console, print_wide
from typer.testing import CliRunner

from tests.support.otlp import to_otlp_json
from tests.support.reports import INFO, make_results
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]


def test_check_table_keeps_every_number_whole_off_a_terminal(tmp_path: Path) -> None:
    traces = tmp_path / "traces.jsonl"
    slow = [
        rag_trace(trace_id=f"{1:032x}", retrieval=5500.55, queue=12000.4),
        rag_trace(trace_id=f"{2:032x}", prompt=987.65, gateway=44.4),
    ]
    traces.write_text("".join(to_otlp_json(t.spans).replace("\n", "") + "\n" for t in slow))
    budget = str(REPO / "budget.yaml")
    runner = CliRunner()
    verdicts = json.loads(
        runner.invoke(app, ["check", str(traces), "--budget", budget, "--format", "json"]).stdout
    )
    table = runner.invoke(app, ["check", str(traces), "--budget", budget]).stdout
    assert "…" not in table
    for verdict in verdicts:
        assert verdict["trace_id"] in table  # whole ids: searchable in Jaeger
        assert f"{verdict['ttft_ms']:.1f}" in table
        for stage in verdict["stages"]:
            if stage["ms"] is not None:
                assert f"{stage['ms']:.1f}" in table
        assert ", ".join(verdict["blame"]) in table


def test_load_test_report_keeps_every_column_off_a_terminal() -> None:
    budget = load_budget(REPO / "budget.yaml").budget
    report = build_report(make_results(budget, count=300), budget, INFO)  # enough for a p99
    out = io.StringIO()
    console = Console(file=out, soft_wrap=True, width=10_000)  # as make_console() off a tty
    render_terminal(report, console)
    text = out.getvalue()
    assert "…" not in text
    for column in ("target", "limit", "p50", "p90", "p95", "p99", "max", ">limit"):
        assert column in text
    for stage in report.stages:
        assert f"{stage.summary.p99_ms:.1f}" in text
        assert f"{stage.summary.over_limit_share:.1%}" in text
    # The verdicts' counts read as words, best first, not as a Python dict.
    assert "{" not in text
    counts = ", ".join(
        f"{n} {status}"
        for status in ("ok", "warn", "overrun", "error", "incomplete")
        if (n := report.by_status.get(status, 0))
    )
    assert f"verdicts {report.joined}/{report.requests} ({counts})" in " ".join(text.split())


def test_a_table_wider_than_the_terminal_is_printed_whole() -> None:
    table = Table("stage", "a rather long column heading", "value")
    table.add_row("retrieval", "x" * 60, "12345.67")
    out = io.StringIO()
    narrow = Console(file=out, width=40, force_terminal=True, color_system=None)
    print_wide(narrow, table)
    assert "12345.67" in out.getvalue()
    assert "a rather long column heading" in out.getvalue()


def test_make_console_off_a_terminal_does_not_wrap() -> None:
    console = make_console()  # pytest's stdout is not a terminal
    assert not console.is_terminal
    assert console.soft_wrap


def test_help_off_a_terminal_reads_as_paragraphs_with_whole_examples() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spanbudget", "check", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = [line.strip() for line in result.stdout.splitlines()]
    # A paragraph is filled to the width: no line of it could have taken the next word.
    start = next(i for i, line in enumerate(lines) if line.startswith("Exit 0 when no trace"))
    end = next(i for i in range(start, len(lines)) if lines[i].endswith("reads stdin."))
    for line, following in zip(lines[start:end], lines[start + 1 : end + 1], strict=True):
        assert len(line) + 1 + len(following.split()[0]) > HELP_WIDTH - 4, result.stdout
    assert (
        "spanbudget check --jaeger-url http://127.0.0.1:16686 --service rag-gateway --since 15m"
        in lines
    )


def test_load_test_report_from_few_requests_says_so() -> None:
    """60 requests: no p99 (299 needed) and no phase p95 from 20 (59 needed), an SLO line
    with its interval; the percentiles that are bounded are printed."""
    budget = load_budget(REPO / "budget.yaml").budget
    report = build_report(make_results(budget), budget, INFO)
    out = io.StringIO()
    render_terminal(report, Console(file=out, soft_wrap=True, width=10_000))
    text = " ".join(out.getvalue().split())
    retrieval = next(s for s in report.stages if s.name == "retrieval").summary
    assert retrieval.count < 59  # requests with no verdict, or no first token
    cells = f"{retrieval.p50_ms:.1f} {retrieval.p90_ms:.1f} few few {retrieval.max_ms:.1f}"
    assert cells in text
    within = round(report.within_limits * report.requests)
    assert f"{within} of 60 requests within every limit" in text
    assert "Wilson" in text
    assert "phase burst: 20 requests" in text
    assert "p95: not enough requests (59 needed)" in text
