"""`spanbudget demo` refuses bad input with exit 2 and a message, before starting anything."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from spanbudget.cli import app


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
