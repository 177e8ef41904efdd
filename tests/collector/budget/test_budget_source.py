"""The budget a command uses: --budget, else ./budget.yaml, else the packaged default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spanbudget.app.cli import app
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.source import (
    Origin,
    find_budget,
    packaged_budget,
    write_default_budget,
)
from typer.testing import CliRunner

from tests.support.otlp import to_otlp_json
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]


def test_the_packaged_default_is_the_repository_budget() -> None:
    assert packaged_budget().read_bytes() == (REPO / "budget.yaml").read_bytes()
    assert load_budget(packaged_budget()).budget.name == "rag-ttft"


def test_given_beats_local_beats_packaged(tmp_path: Path) -> None:
    given = tmp_path / "elsewhere.yaml"
    assert find_budget(given, cwd=tmp_path).origin is Origin.GIVEN
    assert find_budget(None, cwd=tmp_path).origin is Origin.PACKAGED
    assert find_budget(None, cwd=tmp_path).path == packaged_budget()
    (tmp_path / "budget.yaml").write_text("version: 1\n")
    local = find_budget(None, cwd=tmp_path)
    assert (local.origin, local.path) == (Origin.WORKING_DIRECTORY, tmp_path / "budget.yaml")
    assert "budget init" in find_budget(None, cwd=tmp_path / "nothing-here").describe()


def test_write_default_refuses_to_overwrite_an_edited_table(tmp_path: Path) -> None:
    written = write_default_budget(tmp_path)
    assert written == tmp_path / "budget.yaml"
    written.write_text("edited")
    with pytest.raises(FileExistsError):
        write_default_budget(tmp_path)
    assert written.read_text() == "edited"
    write_default_budget(written, force=True)
    assert written.read_bytes() == packaged_budget().read_bytes()


def _tight_budget(text: str) -> str:
    """The default with retrieval's limit cut from 40 to 10 ms."""
    assert "    target_ms: 20\n    limit_ms: 40\n" in text
    return text.replace(
        "    target_ms: 20\n    limit_ms: 40\n", "    target_ms: 5\n    limit_ms: 10\n"
    )


def test_check_judges_with_the_budget_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "trace.json"
    trace.write_text(to_otlp_json(rag_trace().spans))  # retrieval 18 ms: within 40, over 10
    runner = CliRunner()

    packaged = runner.invoke(app, ["check", str(trace), "--format", "json"])
    assert packaged.exit_code == 0, packaged.output
    assert "the packaged default" in packaged.stderr
    assert json.loads(packaged.stdout)[0]["status"] == "ok"

    init = runner.invoke(app, ["budget", "init"])
    assert init.exit_code == 0, init.output
    local = tmp_path / "budget.yaml"
    local.write_text(_tight_budget(local.read_text()))
    judged = runner.invoke(app, ["check", str(trace), "--format", "json"])
    assert judged.exit_code == 1, judged.output
    assert "budget.yaml (found in the current directory)" in judged.stderr
    assert json.loads(judged.stdout)[0]["blame"] == ["retrieval"]

    again = runner.invoke(app, ["budget", "init"])
    assert again.exit_code == 2
    assert "--force" in again.stderr
