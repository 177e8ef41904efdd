"""`spanbudget demo` refuses bad input with exit 2 and a message, before starting anything."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from spanbudget.cli import app
from spanbudget.collector.budget_file import load_budget
from spanbudget.collector.loadtest.report import build_report
from spanbudget.demo import what_to_look_at
from tests.loadtest.test_report import INFO, make_results

REPO = Path(__file__).resolve().parents[2]


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
    """The hint reads the report the load test writes: a renamed field fails here."""
    budget = load_budget(REPO / "budget.yaml").budget
    report = build_report(make_results(budget), budget, INFO)
    nominal, burst = report.phases
    assert burst.name == "burst"
    burst = replace(burst, stage_p95_ms={**burst.stage_p95_ms, "retrieval": 61.0})  # over 40
    said = what_to_look_at(replace(report, phases=(nominal, burst)))
    assert said.startswith("nominal: ")
    assert "; burst: " in said
    assert "retrieval p95 61 ms > 40" in said
    assert what_to_look_at(None).startswith("the logs")
