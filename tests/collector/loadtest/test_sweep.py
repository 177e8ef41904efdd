"""The knee of the curve, from made-up steps: a stage that stays within its limit, one that
breaks at a known rate, one that is not decided; the step lengths; the files' forms; the
80-column tables and the chart."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from spanbudget.app.cli import app
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.loadtest.render_sweep import render_sweep
from spanbudget.collector.loadtest.report import build_report
from spanbudget.collector.loadtest.sweep import (
    BOUNDED_P95,
    P95,
    SLO_ROW,
    TTFT_ROW,
    Decision,
    Sweep,
    SweepStep,
    find_knee,
    parse_sweep,
)
from spanbudget.collector.loadtest.sweep_chart import sweep_chart, sweep_page
from spanbudget.collector.loadtest.sweep_run import STEP_CAP_S, step_phase
from spanbudget.collector.stats import min_count, percentile
from typer.testing import CliRunner

from tests.support.reports import INFO, make_results

REPO = Path(__file__).resolve().parents[3]
RATES = (2.0, 5.0, 8.0, 11.0)
LIMITS = {"steady": 40.0, "breaks": 20.0, "unsure": 100.0}
WITHIN, OVER, UNSURE = Decision.WITHIN, Decision.OVER, Decision.NOT_DECIDED


def within(limit: float) -> P95:
    """A p95 whose whole interval is below the limit."""
    return P95(300, limit * 0.6, limit * 0.5, limit * 0.7)


def over(limit: float, by: float = 1.5) -> P95:
    return P95(300, limit * by, limit * (by - 0.2), limit * (by + 0.2))


def straddling(limit: float) -> P95:
    return P95(300, limit * 0.97, limit * 0.9, limit * 1.1)


def step(rate: float, stages: Mapping[str, P95], *, within_n: int = 300) -> SweepStep:
    return SweepStep(
        rate=rate,
        run_id=f"sw-r{rate:g}",
        requests=300,
        errors=0,
        joined=300,
        within=within_n,
        duration_s=300 / rate,
        stages=stages,
        ttft=within(250),
        slo_met=within_n / 300 >= 0.95,
    )


def made_up_sweep() -> Sweep:
    """steady: within at every rate; breaks: within at 2 and 5, over from 8; unsure: within
    at 2, its interval straddling its limit from 5 on. The share within every limit falls
    below the objective at 11."""
    steps = []
    for rate in RATES:
        stages = {
            "steady": within(40),
            "breaks": within(20) if rate < 8 else over(20),
            "unsure": within(100) if rate < 5 else straddling(100),
        }
        steps.append(step(rate, stages, within_n=299 if rate < 11 else 240))
    return Sweep(
        run_id="sw",
        budget_name="b",
        objective=0.95,
        total_limit_ms=250.0,
        limits_ms=LIMITS,
        targets_ms={name: limit / 2 for name, limit in LIMITS.items()},
        rates=list(RATES),
        steps=steps,
        ui_url="http://127.0.0.1:4318",
    )


def test_sweep_parses_from_to_step_and_says_what_to_change() -> None:
    assert parse_sweep("2:14:3") == [2, 5, 8, 11, 14]
    assert parse_sweep("2:13:3") == [2, 5, 8, 11]  # TO only when it falls on the grid
    assert parse_sweep("0.5:1.5:0.5") == [0.5, 1.0, 1.5]
    assert parse_sweep("4:4:1") == [4]
    for bad, why in (
        ("2:14", "FROM:TO:STEP"),
        ("a:4:1", "numbers"),
        ("0:4:1", "above 0"),
        ("2:4:0", "above 0"),
        ("5:4:1", "at least FROM"),
        ("1:1000:1", "at most 50"),
        ("1:inf:1", "finite"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_sweep(bad)


def test_a_p95_is_within_over_or_not_decided_by_its_whole_interval() -> None:
    below = [float(v) for v in range(1, 201)]  # p95 190.05, every value up to 200
    assert P95.of(below).judge(201.0) is WITHIN
    assert P95.of(below).judge(0.5) is OVER
    # The interval of the p95 of 1..200 runs from about 185 to 197: a limit in it decides
    # nothing, even though the point estimate is on one side.
    figure = P95.of(below)
    assert figure.low_ms is not None
    assert figure.high_ms is not None
    assert figure.low_ms < 190.0 < figure.high_ms
    assert figure.p95_ms == percentile(below, 95)
    assert figure.judge(191.0) is UNSURE
    assert figure.judge(189.0) is UNSURE


def test_too_few_values_are_few_and_a_p95_without_an_upper_end_is_never_within() -> None:
    assert P95.of([1.0] * (min_count(95) - 1)).judge(100.0) is Decision.FEW
    assert P95.of([]).judge(100.0) is Decision.FEW
    # From 59 to 71 values the largest does not bound the p95 from both sides: such a step
    # can be decided over its limit, never within it.
    enough_for_a_p95 = P95.of([1.0] * min_count(95))
    assert enough_for_a_p95.high_ms is None
    assert enough_for_a_p95.judge(100.0) is UNSURE
    assert P95.of([500.0] * min_count(95)).judge(100.0) is OVER
    assert BOUNDED_P95 == 72
    assert P95.of([1.0] * BOUNDED_P95).judge(100.0) is WITHIN


def test_the_knee_per_stage_and_the_stage_that_breaks_first() -> None:
    sweep = made_up_sweep()
    knees = {knee.name: knee for knee in sweep.knees()}
    assert list(knees) == ["steady", "breaks", "unsure", TTFT_ROW, SLO_ROW]
    steady = knees["steady"]
    assert (steady.holds_to, steady.undecided_at, steady.breaks_at) == (11, None, None)
    assert steady.held_throughout
    breaks = knees["breaks"]
    assert (breaks.holds_to, breaks.undecided_at, breaks.breaks_at) == (5, None, 8)
    assert not breaks.held_throughout
    unsure = knees["unsure"]
    assert (unsure.holds_to, unsure.undecided_at, unsure.breaks_at) == (2, 5, None)
    assert knees[TTFT_ROW].held_throughout
    slo = knees[SLO_ROW]  # 299 of 300 is met; 240 of 300 (80 %) is breached
    assert (slo.holds_to, slo.breaks_at) == (8, 11)
    assert sweep.first_break() == ("breaks", 8)
    assert not sweep.slo_met


def test_a_knee_does_not_move_back_up_after_a_break() -> None:
    noisy = [(8.0, WITHIN), (2.0, WITHIN), (5.0, OVER), (11.0, UNSURE)]
    knee = find_knee("s", 10.0, noisy)
    assert (knee.holds_to, knee.undecided_at, knee.breaks_at, knee.swept_to) == (2, None, 5, 11)
    # A step that decides nothing below the knee does not hide it: the knee is the highest
    # rate decided within below the break, and the doubt between the two is named.
    doubt = [(2.0, UNSURE), (5.0, WITHIN), (8.0, WITHIN), (11.0, UNSURE), (14.0, OVER)]
    doubted = find_knee("s", 10.0, doubt)
    assert (doubted.holds_to, doubted.undecided_at, doubted.breaks_at) == (8, 11, 14)
    assert doubted.undecided == (2.0, 11.0)
    assert not doubted.held_throughout
    first_unsure = find_knee("s", 10.0, [(2.0, Decision.FEW), (5.0, OVER)])
    assert (first_unsure.holds_to, first_unsure.undecided_at, first_unsure.breaks_at) == (
        None,
        2,
        5,
    )


def test_between_stages_breaking_at_one_rate_the_furthest_over_breaks_first() -> None:
    sweep = made_up_sweep()
    steps = [
        step(s.rate, {**s.stages, "steady": over(40, by=2.0) if s.rate >= 8 else within(40)})
        for s in sweep.steps
    ]
    twice = replace(sweep, steps=steps)
    assert twice.first_break() == ("steady", 8)  # 2.0 × its limit against breaks' 1.5 ×


def test_sweep_json_reads_back_with_the_same_knees() -> None:
    sweep = made_up_sweep()
    data = json.loads(json.dumps(sweep.to_dict()))
    again = Sweep.from_dict(data)
    assert [k.to_dict() for k in again.knees()] == data["knees"]
    assert data["first_break"] == {"stage": "breaks", "rate": 8.0}
    assert data["min_requests_for_p95"] == 59
    first = data["steps"][0]
    assert first["folder"] == "r2"
    assert first["run_id"] == "sw-r2"
    assert first["within_limits"]["decision"] == "met"
    assert data["steps"][-1]["within_limits"]["decision"] == "breached"  # 240 of 300
    assert first["stages"]["breaks"] == {"count": 300, "p95_ms": 12.0, "low_ms": 10.0,
                                         "high_ms": 14.0}  # fmt: skip


def test_a_step_takes_its_figures_from_the_run_report_and_records(tmp_path: Path) -> None:
    budget = load_budget(REPO / "budget.yaml").budget
    results = make_results(budget)
    report = build_report(results, budget, INFO)
    figures = SweepStep.of(4.0, report, results)
    assert figures.run_id == INFO.run_id
    assert figures.requests == report.requests == 60
    assert figures.within == round(report.within_limits * report.requests)
    for line in report.stages:
        # The same values as the run's report, so the same p95; and its count.
        assert figures.stages[line.name].p95_ms == line.summary.p95_ms
        assert figures.stages[line.name].count == line.summary.count
    assert figures.ttft.count == report.ttft.count


def test_each_step_holds_what_a_p95_needs_and_is_bounded_in_time() -> None:
    assert step_phase(8, 30.0, None).requests == 240
    slow = step_phase(2, 30.0, None)  # 60 in 30 s: lengthened to what bounds a p95
    assert slow.requests == BOUNDED_P95
    assert slow.name == "r2"
    crawl = step_phase(0.1, 30.0, None)  # 720 s for 72: capped, and fewer than a p95 needs
    assert crawl.requests is None
    assert crawl.duration_s == STEP_CAP_S
    assert crawl.rate * STEP_CAP_S < min_count(95)
    assert step_phase(3, None, 40).requests == 40  # asked for exactly: as asked


def _rendered(sweep: Sweep) -> str:
    console = Console(width=80, record=True, force_terminal=False)
    render_sweep(sweep, console)
    return console.export_text()


def test_the_terminal_tables_fit_80_columns_and_name_the_first_break() -> None:
    text = _rendered(made_up_sweep())
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "breaks first: breaks, p95 30.0 ms over its 20 ms limit at 8 req/s" in text
    knee_table = text[text.index("holds to") : text.index("p95 there:")]
    rows = {line.split()[0]: line.split() for line in knee_table.splitlines() if line.strip()}
    # stage, limit, holds to, not decided, breaks at, ...
    assert rows["steady"][1:5] == ["40", "≥11", "—", "—"]
    assert rows["breaks"][1:5] == ["20", "5", "—", "8"]
    assert rows["unsure"][1:5] == ["100", "2", "5", "—"]
    # Per step: 8 req/s has breaks over (!) and unsure not decided (?).
    eight = next(line for line in text.splitlines() if line.split()[:1] == ["8"])
    assert "30.0!" in eight
    assert "97.0?" in eight


def test_the_chart_draws_each_stage_against_its_limit() -> None:
    sweep = made_up_sweep()
    svg = str(sweep_chart(sweep))
    assert svg.startswith("<svg")
    assert 'role="img"' in svg
    assert svg.count("<polyline") == len(LIMITS) + 1  # each stage and TTFT
    assert 'class="mark limit"' in svg
    # Four rates for five lines; hollow where not decided (unsure from 5 on: three points).
    assert svg.count("<circle") == 4 * (len(LIMITS) + 1)
    assert svg.count("d-not_decided") == 3
    assert len(re.findall(r'class="pt s1 d-over"', svg)) == 2  # breaks at 8 and 11
    few_steps = [step(s.rate, {**s.stages, "steady": P95(10, 5.0, 1.0, None)}) for s in sweep.steps]
    few = replace(sweep, steps=few_steps)
    assert str(sweep_chart(few)).count('data-stage="steady"><polyline') == 0
    page = sweep_page(sweep)
    assert "<svg" in page
    assert "--s0" in page
    assert 'href="r8/report.html"' in page
    assert 'href="http://127.0.0.1:4318/runs/sw-r8"' in page


def test_the_budget_file_runs_through(tmp_path: Path) -> None:
    """A sweep built from the repository's budget renders with its five stages."""
    budget: Budget = load_budget(REPO / "budget.yaml").budget
    limits = {s.name: s.limit_ms for s in budget.stages}
    steps = [step(r, {n: within(lim) for n, lim in limits.items()}) for r in RATES]
    sweep = Sweep("b", budget.name, budget.slo_objective, budget.total_limit_ms, limits,
                  {s.name: s.target_ms for s in budget.stages}, list(RATES), steps)  # fmt: skip
    text = _rendered(sweep)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "no stage went over its limit at p95 up to 11 req/s" in text


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--sweep", "5:2:1"], "TO must be at least FROM"),
        (["--sweep", "2:8:3", "--rate", "4"], "give --rate or --sweep, not both"),
        (["--sweep", "2:8:3", "--requests", "60", "--duration", "5s"], "not both"),
    ],
)
def test_the_cli_refuses_a_sweep_it_cannot_run(args: list[str], why: str) -> None:
    result = CliRunner().invoke(
        app, ["loadtest", "--target", "http://127.0.0.1:9", "--budget", str(REPO / "budget.yaml"),
              *args],
    )  # fmt: skip
    assert result.exit_code == 2
    assert why in result.output
