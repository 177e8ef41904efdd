"""`spanbudget report` shows where the budget went: for trace files (judged with the
judging core, as `check` judges them) and for a run folder, as a table or as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spanbudget.app.cli import app
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.verdict import Status
from spanbudget.collector.loadtest.files import write_report, write_results
from spanbudget.collector.loadtest.report import build_report
from spanbudget.collector.stats import UNATTRIBUTED, ShareRow, share_of
from typer.testing import CliRunner

from tests.support.otlp import to_otlp_json
from tests.support.reports import INFO, make_results, make_verdicts
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
BUDGET_PATH = str(REPO / "budget.yaml")
BUDGET = load_budget(REPO / "budget.yaml").budget
runner = CliRunner()


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    """30 traces: prefill over its limit in every third, retrieval in every fifth."""
    spans = []
    for i in range(30):
        spans += rag_trace(
            trace_id=f"{i + 1:032x}",
            prefill=30 if i % 3 == 0 else 0,
            retrieval=45 if i % 5 == 0 else 0,
            client_root=i % 4 != 0,
        ).spans
    path = tmp_path / "traces.json"
    path.write_text(to_otlp_json(spans))
    return path


def test_trace_files_get_the_share_table_and_the_sentence(trace_file: Path) -> None:
    result = runner.invoke(app, ["report", str(trace_file), "--budget", BUDGET_PATH])
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "where the budget went: 30 traces, budget rag-ttft" in out
    for name in (*BUDGET.stage_names(), UNATTRIBUTED):
        assert f" {name} " in out
    # 10 overruns on prefill alone (i % 3 == 0 but not i % 5 == 0: 8), retrieval first in
    # the ones that overran both (i % 15 == 0: 2 -> retrieval is further over) and 4 more.
    assert "Across these traces, retrieval took" not in out
    assert "Across these traces, prefill took" in out
    assert "of the blame (only 14 overruns: 95 % interval" in out


def test_json_is_the_share_of_the_judged_verdicts(trace_file: Path) -> None:
    result = runner.invoke(
        app, ["report", str(trace_file), "--budget", BUDGET_PATH, "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["budget"] == "rag-ttft"
    assert shown["traces"] == 30
    assert shown["overruns"] == 14
    blamed = {s["name"]: s["blamed"] for s in shown["stages"]}
    assert blamed == {
        "network": 0,
        "gateway": 0,
        "retrieval": 6,
        "prompt": 0,
        "prefill": 8,
        UNATTRIBUTED: 0,
    }
    assert sum(s["time_share"] for s in shown["stages"]) == pytest.approx(1.0)
    # Every trace starts at the same instant: one slice holds them all.
    assert [s["traces"] for s in shown["slices"]] == [30]


def test_an_unreadable_file_exits_2_after_the_rest_is_shown(trace_file: Path) -> None:
    bad = trace_file.with_name("bad.json")
    bad.write_text("{not json")
    result = runner.invoke(app, ["report", str(trace_file), str(bad), "--budget", BUDGET_PATH])
    assert result.exit_code == 2
    assert "30 traces" in result.stdout
    assert "1 of 2 inputs could not be read" in " ".join(result.output.split())
    other = trace_file.with_name("other.yaml")
    other.write_text(
        "version: 1\nname: other\ntotal: {target_ms: 10, limit_ms: 20}\n"
        "stages:\n  - {name: cache, target_ms: 5, limit_ms: 10, match: [{name: 'cache.*'}]}\n"
    )
    nothing = runner.invoke(app, ["report", str(trace_file), "--budget", str(other)])
    assert nothing.exit_code == 2
    assert "no trace judged" in " ".join(nothing.output.split())


def test_a_run_folder_adds_the_share_to_its_report(tmp_path: Path) -> None:
    results = make_results(BUDGET)
    write_results(tmp_path / "requests.csv", BUDGET.stage_names(), results)
    write_report(tmp_path / "report.json", build_report(results, BUDGET, INFO))
    table = runner.invoke(app, ["report", str(tmp_path)])
    assert table.exit_code == 1  # as before: the run missed its objective
    out = " ".join(table.stdout.split())
    assert "BREACHED" in out  # the report as before, then the share
    assert out.index("BREACHED") < out.index("where the budget went in run run-t")
    assert "In run run-t, " in out
    shown = json.loads(runner.invoke(app, ["report", str(tmp_path), "--format", "json"]).stdout)
    assert shown["run_id"] == "run-t"
    verdicts = make_verdicts(BUDGET)[:58]  # the two last requests got no verdict
    expected = share_of(
        [ShareRow.of(v, at=i * 0.25 + 0.001) for i, v in enumerate(verdicts)],
        names=BUDGET.stage_names(),
    )
    assert shown["traces"] == expected.traces
    assert (
        shown["overruns"]
        == expected.overruns
        == sum(1 for v in verdicts if v.status is Status.OVERRUN)
    )
    for ours, theirs in zip(shown["stages"], expected.stages, strict=True):
        assert ours["name"] == theirs.name
        assert ours["ms"] == pytest.approx(theirs.ms, abs=0.01)
        assert ours["blamed"] == theirs.blamed
    assert sum(s["traces"] for s in shown["slices"]) == expected.traces
    wrong = runner.invoke(app, ["report", str(tmp_path), "--budget", BUDGET_PATH])
    assert wrong.exit_code == 2
