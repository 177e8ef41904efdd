"""`spanbudget serve` and `spanbudget ingest` are registered and documented with examples."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from spanbudget.cli import app


@pytest.mark.parametrize("command", ["serve", "ingest"])
def test_command_help_has_an_example(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    assert f"spanbudget {command}" in result.output


def test_ingest_rejects_a_missing_path(tmp_path: object) -> None:
    result = CliRunner().invoke(app, ["ingest", "/nonexistent/path.md"])
    assert result.exit_code == 2
    assert "does not exist" in result.output
