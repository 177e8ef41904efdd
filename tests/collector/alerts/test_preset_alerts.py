"""Traces judged by a recognised library's preset burn that preset's error budget: its
alert rules run beside the budget in effect's, made when its first verdict comes, and page
naming the preset's budget and stage; the budget in effect's rules never count them."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from spanbudget.collector.alerts.budgets import BudgetAlerts
from spanbudget.collector.alerts.engine import Alert, AlertEngine, AlertSettings
from spanbudget.collector.budget.loader import BudgetNames, load_budget, load_preset
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.intake.otlp import PROTOBUF
from spanbudget.collector.judging.auto import Judges
from spanbudget.collector.judging.verdict import Verdict

from tests.collector.alerts.alertmanager import WebhookReceiver
from tests.support.collector import BUDGET, Collector, running_collector
from tests.support.otlp import to_request
from tests.support.servers import wait_until
from tests.support.traces import TraceBuilder, openinference_trace, rag_trace

PRESET = "openinference-ttft"


def pages(receiver: WebhookReceiver) -> list[dict[str, Any]]:
    """Every firing page notified (its labels, `startsAt` and the rest)."""
    return [
        alert
        for body in receiver.received
        for alert in body["alerts"]
        if alert["status"] == "firing" and alert["labels"]["severity"] == "page"
    ]


def send_until_paged(collector: Collector, receiver: WebhookReceiver) -> int:
    """Each tenth of a second two of the preset's overruns and a reference trace (within
    its limits), until a page is notified (30 s at most); the traces sent."""
    sent = 0
    deadline = time.monotonic() + 30
    while not pages(receiver) and time.monotonic() < deadline:
        spans = []
        for retrieval in (200, 210, None):
            sent += 1
            trace_id = f"{sent:032x}"
            trace = (
                rag_trace(trace_id=trace_id)
                if retrieval is None
                else openinference_trace(trace_id, retrieval)
            )
            spans += trace.spans
        answer = collector.post(to_request(spans).SerializeToString(), PROTOBUF)
        assert answer.status_code == 200
        time.sleep(0.1)
    assert pages(receiver), f"no page after {sent} traces"
    return sent


def alerting(tmp_path: Path, receiver: WebhookReceiver, scale: float) -> Any:
    return running_collector(
        tmp_path,
        alerts=True,
        webhook=receiver.url,
        alert_window_scale=scale,
        alert_tick_seconds=0.05,
    )


def test_a_presets_overruns_page_with_its_budget_and_stage(tmp_path: Path) -> None:
    # 1h -> 10 s, 5m -> 0.83 s, for 2m -> 0.33 s
    with WebhookReceiver() as receiver, alerting(tmp_path, receiver, 1 / 360) as collector:
        send_until_paged(collector, receiver)
        paged = {(p["labels"]["budget"], p["labels"]["stage"]) for p in pages(receiver)}
        assert paged == {(PRESET, "retrieval")}
        verdict = collector.verdict(f"{1:032x}")
        assert (verdict["budget"], verdict["instrumentation"]) == (PRESET, "openinference")
        listed = collector.client.get("/api/alerts").json()
        assert listed["budget"] == "rag-ttft"
        assert listed["budgets"] == ["rag-ttft", PRESET]
        stages = {r["stage"] for r in listed["rules"] if r["budget"] == PRESET}
        assert stages == {s.name for s in load_preset("openinference").budget.stages} | {"total"}
        firing = {(r["budget"], r["stage"]) for r in listed["rules"] if r["state"] == "firing"}
        assert firing == {(PRESET, "retrieval")}
        overview = collector.client.get("/overview/body").text
        assert f'retrieval <span class="muted">({PRESET})</span>' in overview
        wait_until(
            lambda: (tmp_path / f"verdicts.alerts.{PRESET}.json").exists(),
            "the preset's alert state saved beside the budget in effect's",
        )


@pytest.mark.timing  # the page must still burn when the collector is back: windows of seconds
def test_a_presets_firing_page_is_carried_across_a_restart(tmp_path: Path) -> None:
    """Its rules are made at start from their saved state, before any of its traces."""
    scale = 1 / 60  # 1h -> 60 s, 5m -> 5 s, for 2m -> 2 s
    with WebhookReceiver() as receiver:
        with alerting(tmp_path, receiver, scale) as collector:
            send_until_paged(collector, receiver)
        with alerting(tmp_path, receiver, scale) as collector:
            listed = collector.client.get("/api/alerts").json()
            assert listed["budgets"] == ["rag-ttft", PRESET]
            firing = [r for r in listed["rules"] if r["state"] == "firing"]
            assert {(r["budget"], r["stage"]) for r in firing} == {(PRESET, "retrieval")}
            before = len(receiver.received)
            time.sleep(1.0)  # twenty ticks of the rules
            assert len(receiver.received) == before, "paged again or resolved on restart"
            again = collector.client.get("/api/alerts").json()["rules"]
            assert {(r["budget"], r["stage"]) for r in again if r["state"] == "firing"} == {
                (PRESET, "retrieval")
            }


@pytest.fixture
def budget() -> Budget:
    return load_budget(BUDGET).budget


def judged(budget: Budget, *traces: TraceBuilder) -> list[Verdict]:
    judges = Judges(budget)
    at = datetime.now(UTC)
    out = []
    for trace in traces:
        result = judges.judge(trace.spans, evaluated_at=at)
        assert result is not None
        out.append(result.verdict)
    return out


class Engines:
    """`BudgetAlerts`' engine maker, keeping what it made."""

    def __init__(self) -> None:
        self.made: list[AlertEngine] = []
        self.sent: list[Alert] = []

    def __call__(self, budget: Budget) -> AlertEngine:
        engine = AlertEngine(budget, self.sent.append, AlertSettings(min_judged=1, min_overruns=1))
        self.made.append(engine)
        return engine


class Asked(BudgetNames):
    """The presets by budget name, keeping the names asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def __call__(self, name: str) -> Budget | None:
        self.asked.append(name)
        return super().__call__(name)


def test_each_verdict_feeds_its_own_budgets_rules_made_at_its_first(budget: Budget) -> None:
    engines = Engines()
    preset = Asked()
    alerts = BudgetAlerts(budget, engines, preset)
    assert [e.budget.name for e in alerts.engines()] == ["rag-ttft"]
    ours = judged(budget, rag_trace(trace_id="1" * 32, retrieval=30))
    theirs = judged(budget, *(openinference_trace(f"{n:032x}", 200) for n in (2, 3)))
    alerts.on_verdicts([*ours, *theirs])
    alerts.on_verdicts(judged(budget, openinference_trace("4" * 32, 30)))
    assert preset.asked == [PRESET]  # made once
    _, preset_engine = alerts.engines()
    assert preset_engine.budget.name == PRESET
    by = {(s.budget, s.stage): s.track.long for s in alerts.rule_states()}
    assert (by[("rag-ttft", "retrieval")].judged, by[("rag-ttft", "retrieval")].over) == (1, 1)
    assert (by[(PRESET, "retrieval")].judged, by[(PRESET, "retrieval")].over) == (3, 2)
    assert not any(stage == "llm" for name, stage in by if name == "rag-ttft")


def test_a_verdict_of_a_budget_no_longer_in_effect_is_left_out(budget: Budget) -> None:
    engines = Engines()
    preset = Asked()
    alerts = BudgetAlerts(budget, engines, preset)
    before = judged(budget, rag_trace(trace_id="1" * 32, retrieval=30))
    alerts.set_budget(load_preset("genai").budget)  # a reload to another budget
    alerts.on_verdicts(before)  # judged under the old one: no rules of it run now
    alerts.on_verdicts(before)
    assert preset.asked == ["rag-ttft"]  # not a preset's: asked once, then left out
    assert len(engines.made) == 1
    assert all(s.track.long.judged == 0 for s in alerts.rule_states())


def test_rules_made_after_the_start_run_on_their_timer(budget: Budget) -> None:
    def timers() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "alert-rules")

    before = timers()
    alerts = BudgetAlerts(budget, Engines(), BudgetNames())
    alerts.start()
    try:
        assert timers() == before + 1
        alerts.on_verdicts(judged(budget, openinference_trace("5" * 32, 200)))
        assert timers() == before + 2
    finally:
        alerts.close()
    assert timers() == before


def test_a_preset_that_cannot_be_loaded_is_logged_once_and_left_out(
    budget: Budget, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def broken(name: str) -> Budget:
        calls.append(name)
        raise OSError("gone")

    alerts = BudgetAlerts(budget, Engines(), broken)
    for n in (6, 7):
        alerts.on_verdicts(judged(budget, openinference_trace(f"{n:032x}", 200)))
    assert calls == [PRESET]
    assert f"no alert rules for budget {PRESET!r}: its preset did not load" in caplog.text
    assert [e.budget.name for e in alerts.engines()] == ["rag-ttft"]
