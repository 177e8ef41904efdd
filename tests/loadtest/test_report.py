"""The report: numbers recomputable from requests.csv, rendered again by `spanbudget report`,
and a report.html whose charts really render in a browser."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from spanbudget.cli import app
from spanbudget.collector.budget import Budget
from spanbudget.collector.budget_file import load_budget
from spanbudget.collector.evaluate import Evaluator
from spanbudget.collector.loadtest.client import RequestRecord
from spanbudget.collector.loadtest.files import read_rows, write_report_json, write_rows
from spanbudget.collector.loadtest.render_html import render_html
from spanbudget.collector.loadtest.report import RunInfo, build_report, request_row, row_columns
from spanbudget.testing.traces import rag_trace

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(REPO / "budget.yaml").budget


def make_rows(budget: Budget, count: int = 60) -> list[dict[str, Any]]:
    evaluator = Evaluator(budget)
    rows = []
    for i in range(count):
        trace_id = f"{i + 1:032x}"
        spans = rag_trace(trace_id=trace_id, retrieval=i % 30, queue=(i * 7) % 60).spans
        verdict = evaluator.evaluate(spans, evaluated_at=datetime.now(UTC))
        assert verdict is not None
        record = RequestRecord(
            index=i,
            phase="nominal" if i < 40 else "burst",
            scheduled_s=i * 0.25,
            sent_s=i * 0.25 + 0.001,
            status_code=200,
            ttft_ms=150.0 + i,
            ttft_sched_ms=151.0 + i,
            itl_mean_ms=20.0,
            itl_p95_ms=25.0,
            total_ms=900.0,
            total_sched_ms=901.0,
            output_tokens=32,
            trace_id=trace_id,
        )
        # The last two never got a verdict (say, the collector dropped them).
        rows.append(request_row(record, verdict.to_dict() if i < count - 2 else None))
    return rows


INFO = RunInfo("run-t", "http://127.0.0.1:8080", "m", "2026-12-02T12:00:00+00:00", 15.0, {})


def test_stage_percentiles_recompute_from_the_csv(budget: Budget, tmp_path: Path) -> None:
    rows = make_rows(budget)
    write_rows(tmp_path / "requests.csv", row_columns(budget), rows)
    report = build_report(rows, budget, INFO)
    again = read_rows(tmp_path / "requests.csv")
    assert build_report(again, budget, INFO) == report
    for stage in report["stages"]:
        values = [r[f"{stage['name']}_ms"] for r in again if r["verdict_status"]]
        if stage["name"] == "network":
            assert stage["ms"]["p50"] == float(np.percentile(values, 50))
        for q in (50, 90, 95, 99):
            assert stage["ms"][f"p{q}"] == pytest.approx(float(np.percentile(values, q)))
        assert stage["ms"]["max"] == max(values)
        over = sum(v > stage["limit_ms"] for v in values) / len(values)
        assert stage["share_over_limit"] == pytest.approx(over)
    assert report["verdicts"]["joined"] == 58
    assert report["verdicts"]["missing"] == 2
    good = sum(1 for r in again if r["verdict_status"] in ("ok", "warn"))
    assert report["slo"]["within_limits"] == pytest.approx(good / 60)
    assert report["goodput_rps"] == pytest.approx(good / 15.0)
    assert report["slo"]["met"] is False
    slowest = [s["ttft_ms"] for s in report["slowest"]]
    assert slowest == sorted(slowest, reverse=True)
    assert len(slowest) == 5


def test_report_command_renders_from_files(budget: Budget, tmp_path: Path) -> None:
    rows = make_rows(budget)
    write_rows(tmp_path / "requests.csv", row_columns(budget), rows)
    write_report_json(tmp_path / "report.json", build_report(rows, budget, INFO))
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 1  # the objective was missed
    assert "BREACHED" in result.stdout
    assert "retrieval" in result.stdout
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3
    assert CliRunner().invoke(app, ["report", str(tmp_path / "nope")]).exit_code == 2


def test_report_of_a_folder_that_is_not_a_run_exits_2(budget: Budget, tmp_path: Path) -> None:
    # Exit 1 would read as "objective breached"; a wrong folder is a usage error.
    write_rows(tmp_path / "requests.csv", row_columns(budget), make_rows(budget, 5))
    for document in ("{}", '{"slo": {"met": true}}', "[1, 2]"):
        (tmp_path / "report.json").write_text(document)
        result = CliRunner().invoke(app, ["report", str(tmp_path)])
        assert result.exit_code == 2, (document, result.output)
        assert "not a load-test run folder" in " ".join(result.output.split())


def test_report_html_renders_in_chromium(
    budget: Budget, tmp_path: Path, debian_binary: Callable[[str], str]
) -> None:
    chromium = debian_binary("chromium")
    rows = make_rows(budget)
    report = build_report(rows, budget, INFO)
    page = tmp_path / "report.html"
    page.write_text(render_html(report, rows))
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1200,2400",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        check=True,
        timeout=120,
        capture_output=True,
    )
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    # A blank page has one or two colours; charts with stage colours have hundreds.
    assert len(colours) > 200
    # The stage colours of the charts are on screen (the first stage's blue, for one).
    assert any(
        abs(c[0] - 0x4E) < 12 and abs(c[1] - 0x79) < 12 and abs(c[2] - 0xA7) < 12
        for _, c in colours
    )
    json.dumps(report)  # the report is plain JSON


def test_incomplete_traces_stay_out_of_stage_statistics(budget: Budget) -> None:
    """With no first token the window is the whole request: its stage times are not TTFT."""
    rows = make_rows(budget, count=20)
    verdict = Evaluator(budget).evaluate(
        rag_trace(trace_id=f"{999:032x}", marks=False).spans, evaluated_at=datetime.now(UTC)
    )
    assert verdict is not None
    incomplete = request_row(RequestRecord(20, "burst", 5.0), verdict.to_dict())
    assert incomplete["verdict_status"] == "incomplete"
    assert incomplete["prefill_ms"] == 352.0  # the whole root span, decode included
    report = build_report([*rows, incomplete], budget, INFO)
    prefill = next(s for s in report["stages"] if s["name"] == "prefill")
    assert prefill["count"] == 18  # the 18 joined complete traces of make_rows, not 19
    assert prefill["ms"]["max"] < 352.0
    assert report["verdicts"]["by_status"]["incomplete"] == 1
    # The per-phase and over-time p95s leave it out too: one rule for every stage statistic.
    burst = next(p for p in report["phases"] if p["name"] == "burst")  # only the incomplete one
    assert burst["stage_p95_ms"]["prefill"] is None
    assert all((w["prefill"] or 0) < 352.0 for w in report["stage_p95_over_time"])
