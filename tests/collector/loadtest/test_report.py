"""The report: records that read back from requests.csv and report.json as they were
written, numbers recomputable from the CSV and equal to the collector's /api/summary on the
same verdicts, rendered again by `spanbudget report`, and a report.html whose charts really
render in a browser."""

from __future__ import annotations

import csv
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from spanbudget.app.cli import app
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Status
from spanbudget.collector.loadtest.client import RequestRecord
from spanbudget.collector.loadtest.files import (
    read_report,
    read_results,
    write_report,
    write_results,
)
from spanbudget.collector.loadtest.records import join
from spanbudget.collector.loadtest.report import build_report
from spanbudget.collector.loadtest.report_model import RunInfo
from spanbudget.collector.sinks.store import VerdictStore
from typer.testing import CliRunner

from tests.support.reports import INFO, make_results, make_verdicts
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(REPO / "budget.yaml").budget


def test_requests_csv_reads_back_into_the_same_records(budget: Budget, tmp_path: Path) -> None:
    results = make_results(budget)
    path = tmp_path / "requests.csv"
    write_results(path, budget.stage_names(), results)
    again = read_results(path)
    assert again == results
    assert again[-1].verdict is None
    assert {r.verdict.stages["network"].status for r in again if r.verdict} == {  # type: ignore[union-attr]
        Status.OK,
        Status.UNMEASURED,
    }
    text = path.read_text().splitlines()
    assert text[0].split(",")[-6:] == [f"{s}_status" for s in budget.stage_names()] + ["blame"]
    (path).write_text("\n".join([text[0].replace("prefill_status", "prefill_x"), *text[1:]]))
    with pytest.raises(ValueError, match="not the columns"):
        read_results(path)


def test_requests_csv_keeps_prompt_tokens_model_and_send_time(
    budget: Budget, tmp_path: Path
) -> None:
    results = make_results(budget, 3)
    path = tmp_path / "requests.csv"
    write_results(path, budget.stage_names(), results)
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(r["prompt_tokens"], r["model"], r["sent_at"]) for r in rows] == [
        ("300", "m", "2026-12-02T12:00:00.000000+00:00"),
        ("301", "m", "2026-12-02T12:00:00.250000+00:00"),
        ("302", "m", "2026-12-02T12:00:00.500000+00:00"),
    ]
    # A file written before these columns existed still reads back, without them.
    dropped = ("prompt_tokens", "model", "sent_at", "verdict_context")
    older = tmp_path / "older.csv"
    with older.open("w", newline="") as file:
        writer = csv.DictWriter(file, [c for c in rows[0] if c not in dropped])
        writer.writeheader()
        writer.writerows({k: v for k, v in row.items() if k not in dropped} for row in rows)
    again = read_results(older)
    assert again == [
        replace(
            r,
            request=replace(r.request, prompt_tokens=None, model="", sent_at=""),
            verdict=None if r.verdict is None else replace(r.verdict, context=""),
        )
        for r in results
    ]


def test_report_json_reads_back_into_the_same_report(budget: Budget, tmp_path: Path) -> None:
    info = RunInfo(
        "run-t",
        "http://gw",
        "m",
        "2026-12-02T12:00:00+00:00",
        15.0123456,
        {"seed": 1},
        ui_url="http://bc:4318",
        jaeger_ui="http://jaeger:16686",
    )
    report = build_report(make_results(budget), budget, info)
    write_report(tmp_path / "report.json", report)
    assert read_report(tmp_path / "report.json") == report
    assert report.slowest[0].ui_url.startswith("http://bc:4318/traces/")


def test_stage_figures_recompute_from_the_csv(budget: Budget, tmp_path: Path) -> None:
    write_results(tmp_path / "requests.csv", budget.stage_names(), make_results(budget))
    again = read_results(tmp_path / "requests.csv")
    report = build_report(again, budget, INFO)
    assert report == build_report(make_results(budget), budget, INFO)
    timed = [
        r.verdict
        for r in again
        if r.verdict is not None and r.verdict.status is not Status.INCOMPLETE
    ]
    assert len(timed) < 58  # some have no first token
    for stage in report.stages:
        results = [v.stages[stage.name] for v in timed if v.stages[stage.name].ms is not None]
        values = [ms for ms, _ in results]
        summary = stage.summary
        assert summary.count == len(values)
        if stage.name == "network":
            assert summary.p50_ms == float(np.percentile(values, 50))
            assert summary.count < len(timed)  # server-only traces leave it unmeasured
        for q, got in zip(
            (50, 90, 95, 99),
            (summary.p50_ms, summary.p90_ms, summary.p95_ms, summary.p99_ms),
            strict=True,
        ):
            assert got == pytest.approx(float(np.percentile(values, q)))
        assert summary.max_ms == max(values)
        over = sum(status is Status.OVERRUN for _, status in results) / len(values)
        assert summary.over_limit_share == pytest.approx(over)
        # Over the limit as the verdict says it is the time past the stage's limit.
        assert over == pytest.approx(sum(v > stage.limit_ms for v in values) / len(values))
    assert report.stages[2].summary.over_limit_share  # some retrieval went over
    assert report.joined == 58
    assert report.missing == 2
    good = sum(
        1 for r in again if r.verdict is not None and r.verdict.status.value in ("ok", "warn")
    )
    assert report.within_limits == pytest.approx(good / 60)
    assert report.goodput_rps == pytest.approx(good / 15.0)
    assert report.slo_met is False
    slowest = [s.ttft_ms for s in report.slowest]
    assert slowest == sorted(slowest, reverse=True)
    assert len(slowest) == 5


def test_the_report_and_the_api_summary_agree_on_the_same_verdicts(
    budget: Budget, tmp_path: Path
) -> None:
    """One summary, one rule, one set of keys: a run's report.json and the collector's
    /api/summary over the same verdicts give the same figures for every stage and TTFT."""
    verdicts = make_verdicts(budget)
    store = VerdictStore(tmp_path / "v.db", retention_seconds=86400, retention_count=1000)
    store.write([(v, 11) for v in verdicts])
    api = store.summary()
    store.close()
    records = [
        RequestRecord(i, "main", i * 0.1, status_code=200, trace_id=v.trace_id)
        for i, v in enumerate(verdicts)
    ]
    report = build_report(join(records, {v.trace_id: v for v in verdicts}), budget, INFO).to_dict()
    assert [s["name"] for s in report["stages"]] == [s["name"] for s in api["stages"]]
    for ours, theirs in zip(report["stages"], api["stages"], strict=True):
        assert {key: ours[key] for key in theirs} == theirs
        assert ours["count"] > 0
    assert report["ttft"] == api["ttft"]
    assert report["verdicts"]["by_status"] == {k: n for k, n in api["status_counts"].items() if n}


def test_report_command_renders_from_files(budget: Budget, tmp_path: Path) -> None:
    results = make_results(budget)
    write_results(tmp_path / "requests.csv", budget.stage_names(), results)
    write_report(tmp_path / "report.json", build_report(results, budget, INFO))
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 1  # the objective was missed
    assert "BREACHED" in result.stdout
    assert "retrieval" in result.stdout
    html = (tmp_path / "report.html").read_text()
    # The web UI's SVG charts: the stages' bands, one distribution per stage, two of TTFT,
    # the p95 over time; no image and no script.
    assert html.count('<svg class="chart') == 1 + len(budget.stages) + 2 + 1
    assert "<img" not in html
    assert "<script" not in html
    missing = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    said = " ".join(missing.output.split())
    assert f"(No such file or directory: {tmp_path / 'nope' / 'report.json'})" in said
    assert "Error(" not in said


def test_report_of_a_folder_that_is_not_a_run_exits_2(budget: Budget, tmp_path: Path) -> None:
    # Exit 1 would read as "objective breached"; a wrong folder is a usage error.
    write_results(tmp_path / "requests.csv", budget.stage_names(), make_results(budget, 5))
    for document in ("{}", '{"slo": {"met": true}}', "[1, 2]"):
        (tmp_path / "report.json").write_text(document)
        result = CliRunner().invoke(app, ["report", str(tmp_path)])
        assert result.exit_code == 2, (document, result.output)
        assert "not a load-test run folder" in " ".join(result.output.split())


def test_incomplete_traces_stay_out_of_stage_statistics(budget: Budget) -> None:
    """With no first token the window is the whole request: its stage times are not TTFT."""
    results = make_results(budget, count=20)
    trace_id = f"{999:032x}"
    verdict = Evaluator(budget).evaluate(
        rag_trace(trace_id=trace_id, marks=False).spans, evaluated_at=datetime.now(UTC)
    )
    assert verdict is not None
    (incomplete,) = join([RequestRecord(20, "burst", 5.0, trace_id=trace_id)], {trace_id: verdict})
    assert incomplete.verdict is not None
    assert incomplete.verdict.status is Status.INCOMPLETE
    assert incomplete.verdict.stages["prefill"].ms == 352.0  # the whole root span, decode included
    report = build_report([*results, incomplete], budget, INFO)
    prefill = next(s for s in report.stages if s.name == "prefill")
    complete = sum(
        1 for r in results if r.verdict is not None and r.verdict.status is not Status.INCOMPLETE
    )
    assert prefill.summary.count == complete  # the joined complete traces of make_results
    assert prefill.summary.max_ms is not None
    assert prefill.summary.max_ms < 352.0
    assert report.by_status["incomplete"] == 2  # one of make_results, and this one
    # The per-phase and over-time p95s leave it out too: one rule for every stage statistic.
    burst = next(p for p in report.phases if p.name == "burst")  # only the incomplete one
    assert burst.stage_p95_ms["prefill"] is None
    assert all((w.stage_p95_ms["prefill"] or 0) < 352.0 for w in report.stage_p95_over_time)
