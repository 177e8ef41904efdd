"""`loadtest --sweep` against the real embedded stack on 127.0.0.1: a short sweep whose
every step is a normal run (its own run id, folder and verdicts in the collector), then
sweep.json, sweep.html and the knee table."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from spanbudget.app.stack import spanbudget_command
from spanbudget.collector.loadtest.files import read_report
from spanbudget.collector.stats import min_count

from tests.support.stack import corpus_copy, local_stack, running

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
ENV = {"HF_HUB_OFFLINE": "1", "OTEL_BSP_SCHEDULE_DELAY": "200", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, small_corpus: Path
) -> Iterator[tuple[str, str]]:
    root = tmp_path_factory.mktemp("sweep-stack")
    data = corpus_copy(small_corpus, root)
    spec = local_stack(data, root, ENV)
    with running(spec.children()):
        yield spec.gateway_url, spec.collector_url


def test_a_short_sweep_gives_a_run_per_rate_and_the_knee_per_stage(
    stack: tuple[str, str], tmp_path: Path
) -> None:
    gateway, collector = stack
    out = tmp_path / "sweep"
    result = subprocess.run(
        spanbudget_command(
            "loadtest",
            "--target",
            gateway,
            "--collector",
            collector,
            "--sweep",
            "10:20:10",
            "--requests",
            str(min_count(95)),
            "--run-id",
            "e2e-sweep",
            "--out",
            str(out),
            "--budget",
            str(REPO / "budget.yaml"),
        ),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    sweep = json.loads((out / "sweep.json").read_text())
    assert [s["rate"] for s in sweep["steps"]] == [10.0, 20.0]
    assert sweep["failed"] == ""
    for step in sweep["steps"]:
        # Each step is a normal run: its files, and its verdicts under its own run id.
        folder = out / step["folder"]
        assert step["run_id"] == f"e2e-sweep-{step['folder']}"
        report = read_report(folder / "report.json")
        assert report.info.run_id == step["run_id"]
        assert report.requests == step["requests"] == min_count(95)
        assert (folder / "requests.csv").is_file()
        assert (folder / "report.html").is_file()
        assert step["errors"] == 0
        listed = httpx.get(
            f"{collector}/api/verdicts", params={"run_id": step["run_id"], "limit": "200"}
        ).json()
        verdicts = listed if isinstance(listed, list) else listed["verdicts"]
        assert len(verdicts) == step["joined"] >= min_count(95) - 2
        assert step["enough_for_p95"]
        # Each stage's p95 is the run report's own p95 of that stage.
        for line in report.stages:
            assert step["stages"][line.name]["p95_ms"] == line.summary.p95_ms
    # The knee rows: the five stages, TTFT and the share within every limit, each with
    # a decision consistent with its steps.
    names = [k["name"] for k in sweep["knees"]]
    assert names == ["network", "gateway", "retrieval", "prompt", "prefill", "TTFT",
                     "within every limit"]  # fmt: skip
    for knee in sweep["knees"]:
        assert knee["holds_to"] in (None, 10.0, 20.0)
        assert knee["breaks_at"] in (None, 10.0, 20.0)
    # The exit code is the load tester's: 0 only when every step held the objective.
    assert (result.returncode == 0) == all(s["slo_met"] for s in sweep["steps"])
    page = (out / "sweep.html").read_text()
    assert page.count("<svg") == 1
    assert "<polyline" in page
    assert "knee per stage" in result.stdout
    assert "breaks first" in result.stdout or "no stage went over" in result.stdout
