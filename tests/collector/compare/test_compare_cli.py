"""`spanbudget compare` on each kind of side: run folders as `loadtest` writes them, trace
files as `check` reads them, and a running collector's runs and windows; its exit codes,
JSON and page."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from spanbudget.app.cli import app
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.loadtest.client import RequestRecord
from spanbudget.collector.loadtest.files import REQUESTS_CSV, write_results
from spanbudget.collector.loadtest.records import join
from typer.testing import CliRunner

from tests.collector.compare.conftest import BUDGET_PATH, traces, verdicts
from tests.support.collector import running_collector, send_spans
from tests.support.otlp import to_otlp_json
from tests.support.traces import rag_trace

runner = CliRunner()
FAST = ["--resamples", "500"]


def _run_folder(folder: Path, budget: Budget, judged: list[Verdict], phase: str = "main") -> Path:
    """A run folder as `loadtest` writes it: one record per request, joined with its verdict."""
    records = [
        RequestRecord(
            index=i,
            phase=phase if i % 2 else "burst",
            scheduled_s=i * 0.5,
            status_code=200,
            ttft_ms=v.ttft_ms,
            trace_id=v.trace_id,
        )
        for i, v in enumerate(judged)
    ]
    folder.mkdir()
    results = join(records, {v.trace_id: v for v in judged})
    write_results(folder / REQUESTS_CSV, budget.stage_names(), results)
    return folder


@pytest.fixture
def runs(tmp_path: Path, budget: Budget) -> tuple[Path, Path, Path]:
    """Three runs of 120 requests: two alike, one with retrieval 15 ms slower."""
    base = _run_folder(tmp_path / "base", budget, verdicts(budget, traces(120, 1)))
    same = _run_folder(tmp_path / "same", budget, verdicts(budget, traces(120, 2)))
    slow = _run_folder(
        tmp_path / "slow", budget, verdicts(budget, traces(120, 3, slow_retrieval=15))
    )
    return base, same, slow


def _json(args: list[str], code: int) -> dict[str, object]:
    result = runner.invoke(app, ["compare", *args, *FAST, "--format", "json"])
    assert result.exit_code == code, result.output
    document: dict[str, object] = json.loads(result.stdout)
    return document


def test_runs_compared_find_the_slowed_stage_and_exit_1(runs: tuple[Path, Path, Path]) -> None:
    base, _, slow = runs
    document = _json([str(base), str(slow)], 1)
    stages = {s["name"]: s for s in document["stages"]}  # type: ignore[attr-defined]
    assert stages["retrieval"]["change"] == "slower"
    low, high = stages["retrieval"]["p50"]["interval"]
    assert 5 < low < stages["retrieval"]["p50"]["difference"] < high < 25
    others = {n: s["change"] for n, s in stages.items() if n != "retrieval"}
    assert set(others.values()) == {"no detectable change"}, others
    assert document["base"] == {
        "label": "base",
        "kind": "run",
        "source": str(base),
        "requests": 120,
        "left_out": 0,
    }
    assert document["settings"]["resamples"] == 500  # type: ignore[index]
    assert document["passed"] is False
    assert {"rule": "any.slower", "stage": "retrieval", "fired": True, "undecided": False} in (
        document["rules"]  # type: ignore[operator]
    )


def test_alike_runs_pass_and_the_table_fits_80_columns(runs: tuple[Path, Path, Path]) -> None:
    base, same, _ = runs
    result = runner.invoke(app, ["compare", str(base), str(same), *FAST], terminal_width=80)
    assert result.exit_code == 0, result.output
    assert "no detectable change: network, gateway, retrieval, prompt, prefill, ttft" in (
        result.stdout
    )
    assert "500 resamples, seed 0" in result.stdout
    table = result.stdout.split("per stage (ms)\n", 1)[1].split("verdict on p50")[0]
    assert max(len(line) for line in table.splitlines()) <= 80


def test_rules_decide_the_exit_code(runs: tuple[Path, Path, Path]) -> None:
    base, _, slow = runs
    args = ["compare", str(base), str(slow), *FAST]
    assert runner.invoke(app, [*args, "--fail-on", "retrieval.p50>+50%"]).exit_code == 1
    assert runner.invoke(app, [*args, "--fail-on", "retrieval.p50>+40ms"]).exit_code == 0
    assert runner.invoke(app, [*args, "--fail-on", "prefill.slower"]).exit_code == 0
    bad = runner.invoke(app, [*args, "--fail-on", "retreival.p50>+1ms"])
    assert bad.exit_code == 2
    assert "no stage 'retreival'" in bad.output
    bad = runner.invoke(app, [*args, "--fail-on", "retrieval.p50>1"])
    assert bad.exit_code == 2
    assert "not STAGE.STAT>+N UNIT" in bad.output


def test_a_phase_is_compared_alone(runs: tuple[Path, Path, Path]) -> None:
    base, _, slow = runs
    document = _json([str(base), str(slow), "--phase", "burst"], 1)
    assert document["base"]["requests"] == 60  # type: ignore[index]
    missing = runner.invoke(app, ["compare", str(base), str(slow), "--phase", "warmup"])
    assert missing.exit_code == 2
    assert "no request with a timed verdict in phase" in missing.output


def test_trace_files_are_judged_as_check_judges_them(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    (old / "a.json").write_text(to_otlp_json(traces(60, 1)))
    (old / "b.json").write_text(to_otlp_json(traces(60, 2, first=1000)))
    (new / "c.json").write_text(to_otlp_json(traces(120, 3, slow_retrieval=15)))
    args = [str(old), str(new), "--budget", str(BUDGET_PATH), "--fail-on", "retrieval.p95>+20%"]
    document = _json(args, 1)
    assert document["base"]["kind"] == "traces"  # type: ignore[index]
    assert document["base"]["requests"] == 120  # type: ignore[index]
    stages = {s["name"]: s for s in document["stages"]}  # type: ignore[attr-defined]
    assert stages["retrieval"]["change"] == "slower"
    assert stages["retrieval"]["p95"]["few"] is False  # 120 requests bound a p95


def test_requests_with_no_first_token_are_left_out_and_the_budget_said_once(
    tmp_path: Path,
) -> None:
    """20 requests that failed before their first token are no faster prefill: their
    stage times cover a request cut short, not a time to first token."""
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(to_otlp_json(traces(120, 1)))
    failed = [
        span
        for i in range(20)
        for span in rag_trace(trace_id=f"{5000 + i:032x}", marks=False, chat_error=True).spans
    ]
    new.write_text(to_otlp_json(traces(120, 2, first=1000) + failed))
    result = runner.invoke(
        app,
        ["compare", str(old), str(new), "--budget", str(BUDGET_PATH), *FAST, "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["candidate"]["requests"] == 120
    assert document["candidate"]["left_out"] == 20
    assert {s["change"] for s in document["stages"]} == {"no detectable change"}
    assert result.stderr.count("budget: ") == 1  # one budget for both sides, said once


def test_bad_sides_exit_2(tmp_path: Path, runs: tuple[Path, Path, Path]) -> None:
    base, _, _ = runs
    missing = runner.invoke(app, ["compare", str(base), str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert "no such file or folder" in missing.output
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    unreadable = runner.invoke(app, ["compare", str(base), str(junk)])
    assert unreadable.exit_code == 2


def test_the_page_draws_both_distributions_of_every_stage(
    tmp_path: Path, runs: tuple[Path, Path, Path]
) -> None:
    base, _, slow = runs
    page = tmp_path / "compare.html"
    result = runner.invoke(app, ["compare", str(base), str(slow), *FAST, "--html", str(page)])
    assert result.exit_code == 1, result.output
    html = page.read_text()
    for name in ("network", "gateway", "retrieval", "prompt", "prefill", "ttft"):
        section = re.search(
            rf'<section class="cmp-stage" id="stage-{name}">(.*?)</section>', html, re.S
        )
        assert section is not None, name
        assert section.group(1).count("<svg") == 2
    assert 'data-stage="retrieval">retrieval: slower' in html
    assert "500 resamples, seed 0" in html


def test_a_collector_s_runs_and_windows(tmp_path: Path, budget: Budget) -> None:
    with running_collector(tmp_path) as collector:
        base = traces(80, 1, run_id="before")
        slow = traces(80, 2, slow_retrieval=15, run_id="after", first=1000)
        send_spans(collector, base)
        send_spans(collector, slow)
        assert collector.pipeline.core.wait_idle(30)
        collector.verdict(f"{80:032x}")
        collector.verdict(f"{1080:032x}")
        url = ["--collector", collector.url]
        document = _json(["before", "after", *url], 1)
        assert document["base"]["kind"] == "collector run"  # type: ignore[index]
        assert document["candidate"]["requests"] == 80  # type: ignore[index]
        stages = {s["name"]: s["change"] for s in document["stages"]}  # type: ignore[attr-defined]
        assert stages["retrieval"] == "slower"
        assert stages["prefill"] == "no detectable change"
        # A window holds both runs; against itself it shows nothing.
        same = _json(["1h", "1h..", *url], 0)
        assert same["base"]["kind"] == "collector window"  # type: ignore[index]
        assert same["base"]["requests"] == 160  # type: ignore[index]
        empty = runner.invoke(app, ["compare", "2h..1h", "1h", *url])
        assert empty.exit_code == 2
        assert "no verdicts for window 2h..1h" in empty.output
        bad = runner.invoke(app, ["compare", "yesterday..now", "1h", *url])
        assert bad.exit_code == 2
        assert "SINCE..UNTIL" in bad.output
