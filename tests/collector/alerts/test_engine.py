"""Burn-rate alerting on a fake clock: fire once, re-send, resolve; quiet when within budget."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from spanbudget.collector.alerts.burnrate import DEFAULT_RULES, BurnRule, RollingCounts
from spanbudget.collector.alerts.engine import Alert, AlertEngine, AlertSettings
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict

from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
SCALE = 1 / 360  # 1 h -> 10 s, 5 m -> 0.83 s


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(REPO / "budget.yaml").budget


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def verdicts(budget: Budget, count: int, start: int, **extra: float) -> list[Verdict]:
    evaluator = Evaluator(budget)
    out = []
    for i in range(start, start + count):
        v = evaluator.evaluate(
            rag_trace(trace_id=f"{i:032x}", **extra).spans, evaluated_at=datetime.now(UTC)
        )
        assert v is not None
        out.append(v)
    return out


def engine(budget: Budget, clock: Clock, sent: list[Alert], min_judged: int = 5) -> AlertEngine:
    config = AlertSettings(window_scale=SCALE, min_judged=min_judged, resend_s=3.0)
    return AlertEngine(budget, sent.append, config, clock=clock)


def feed(alerts: AlertEngine, clock: Clock, batch: list[Verdict], every_s: float = 0.05) -> None:
    for verdict in batch:
        clock.now += every_s
        alerts.on_verdicts([verdict])


def test_retrieval_overruns_page_once_then_resolve(budget: Budget) -> None:
    clock, sent = Clock(), []
    alerts = engine(budget, clock, sent)
    feed(alerts, clock, verdicts(budget, 40, 1, retrieval=30))  # retrieval 48 ms > 40
    pages = [a for a in sent if a.severity == "page"]
    assert [(a.stage, a.resolved) for a in pages] == [("retrieval", False)]
    page = pages[0]
    assert page.labels() == {
        "alertname": "SpanbudgetBudgetBurn",
        "budget": "rag-ttft",
        "stage": "retrieval",
        "severity": "page",
    }
    notes = page.annotations()
    assert page.burn_short == pytest.approx(20.0)  # every trace over: 1.0 / 0.05
    assert notes["windows"] == "10s/0.833333s"
    assert notes["p95_ms"] == "48.0"
    assert notes["limit_ms"] == "40"
    assert len(page.example_trace_ids) == 5
    assert {a.stage for a in sent} <= {"retrieval"}
    # Still overrunning: re-sent every resend_s with the same start, never a second alert.
    before = len(sent)
    clock.now += 3.1
    alerts.on_verdicts(verdicts(budget, 1, 100, retrieval=30))
    resent = [a for a in sent[before:] if a.severity == "page"]
    assert len(resent) == 1
    assert resent[0].starts_at == page.starts_at
    # Overruns stop: once the short windows of both page rules hold only good traces and
    # the hold is over, the page resolves (6x over 1m/5s, held 2.5 s, is the last one).
    feed(alerts, clock, verdicts(budget, 200, 200), every_s=0.05)
    resolved = [a for a in sent if a.severity == "page" and a.resolved]
    assert len(resolved) == 1
    assert resolved[0].ends_at is not None
    assert resolved[0].starts_at == page.starts_at


def test_within_budget_never_alerts(budget: Budget) -> None:
    clock, sent = Clock(), []
    alerts = engine(budget, clock, sent)
    feed(alerts, clock, verdicts(budget, 200, 1, retrieval=15))  # 33 ms: warn, not over
    clock.now += 20
    alerts.evaluate()
    assert sent == []


def test_duplicates_and_repeats_never_alert_twice(budget: Budget) -> None:
    clock, sent = Clock(), []
    alerts = engine(budget, clock, sent)
    bad = verdicts(budget, 6, 1, retrieval=30)
    good = verdicts(budget, 100, 100)
    feed(alerts, clock, good[:95])  # 95 good, then 6 bad: 6/101 over, burn 1.2x: no page
    feed(alerts, clock, bad)
    for _ in range(5):  # the same verdicts again (a collector re-delivery, a late span)
        alerts.on_verdicts(bad)
    assert [a for a in sent if a.severity == "page"] == []


def test_half_burn_stays_silent_and_min_judged_holds(budget: Budget) -> None:
    clock, sent = Clock(), []
    alerts = engine(budget, clock, sent)
    # 1 in 40 over the limit: 2.5% against a 5% error budget is a 0.5x burn.
    for round_ in range(3):
        start = 1 + round_ * 100
        batch = verdicts(budget, 39, start) + verdicts(budget, 1, start + 50, retrieval=30)
        feed(alerts, clock, batch, every_s=0.01)
    assert sent == []
    clock2, sent2 = Clock(), []
    few = engine(budget, clock2, sent2, min_judged=10)
    feed(few, clock2, verdicts(budget, 4, 1, retrieval=30))  # 100% over, but only 4 traces
    assert [a for a in sent2 if a.severity == "page"] == []


def test_rolling_counts_forget_old_slices() -> None:
    counts = RollingCounts(10.0, ["a"], buckets=10)
    counts.add(0.5, ["a"])
    counts.add(5.5, [])
    assert counts.ratio(6.0, "a") == (0.5, 2)
    assert counts.ratio(11.5, "a") == (0.0, 1)  # the first slice has left the window
    assert counts.ratio(30.0, "a") == (0.0, 0)


def test_rolling_counts_cover_the_whole_window() -> None:
    # As documented: between `window` and `window + slice` seconds back, never less.
    counts = RollingCounts(10.0, ["a"], buckets=10)
    counts.add(0.5, ["a"])
    assert counts.ratio(10.2, "a") == (1.0, 1)  # 9.7 s old: inside a 10 s window
    assert counts.ratio(10.99, "a") == (1.0, 1)
    assert counts.ratio(11.0, "a") == (0.0, 0)  # its whole slice is over 10 s old


def test_a_batch_counts_as_its_traces_one_by_one_until_it_leaves_the_window() -> None:
    one_by_one, batched = (RollingCounts(10.0, ["a", "b"], buckets=10) for _ in range(2))
    for over in (["a"], [], ["a", "b"]):
        one_by_one.add(0.5, over)
    batched.add(0.5, ["a", "a", "b"], traces=3)
    assert batched.ratio(0.6, "a") == (2 / 3, 3)
    for now in (0.6, 10.99, 11.0):
        for stage in ("a", "b"):
            assert batched.ratio(now, stage) == one_by_one.ratio(now, stage)
    assert batched.ratio(11.0, "a") == (0.0, 0)  # the batch's slice left as a whole


def test_verdicts_given_at_once_alert_as_given_one_by_one(budget: Budget) -> None:
    batch = verdicts(budget, 50, 1, retrieval=30) + verdicts(budget, 10, 51)  # burn 16.7x
    clocks, sent = (Clock(), Clock()), ([], [])  # type: ignore[var-annotated]
    alone, together = (engine(budget, c, s) for c, s in zip(clocks, sent, strict=True))
    for verdict in batch:
        alone.on_verdicts([verdict])
    together.on_verdicts(batch)
    for seconds in (0.2, 0.3, 5.0, 12.0):
        for clock in clocks:
            clock.now += seconds
        alone.evaluate()
        together.evaluate()
        assert sent[1] == sent[0]
    assert any(a.stage == "retrieval" and a.severity == "page" for a in sent[1])
    assert together._evidence.values == alone._evidence.values
    assert together._evidence.examples == alone._evidence.examples


def test_default_rules_are_the_workbooks_with_pyrras_for() -> None:
    assert [
        (r.severity, r.factor, r.long_s, r.short_s, r.for_s, r.keep_firing_s) for r in DEFAULT_RULES
    ] == [
        ("page", 14.4, 3600, 300, 120, 120),
        ("page", 6.0, 21600, 1800, 900, 900),
        ("ticket", 1.0, 259200, 21600, 10800, 10800),
    ]
    assert BurnRule("page", 14.4, 3600, 300).describe() == "14.4x over 1h and 5m"
    scaled = DEFAULT_RULES[0].scaled(1 / 60)
    assert (scaled.long_s, scaled.short_s, scaled.for_s, scaled.keep_firing_s) == (60, 5, 2, 2)


def test_a_reload_that_renames_the_budget_resolves_its_firing_alerts(budget: Budget) -> None:
    clock, sent = Clock(), []
    alerts = engine(budget, clock, sent)
    feed(alerts, clock, verdicts(budget, 40, 1, retrieval=30))
    firing = {(a.budget, a.stage, a.severity) for a in sent}
    assert ("rag-ttft", "retrieval", "page") in firing
    assert not any(a.resolved for a in sent)
    alerts.set_budget(replace(budget, name="rag-ttft-v2"))  # SIGHUP with a renamed budget
    clock.now += 1
    alerts.evaluate()
    assert {(a.budget, a.stage, a.severity) for a in sent if a.resolved} == firing
    assert alerts.firing() == []
