"""Pending before firing, a hold before resolving, minimum counts, verdicts seen twice: the
alert engine on the default rules, fed recorded traffic on a fake clock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from spanbudget.collector.alerts.burnrate import DEFAULT_RULES
from spanbudget.collector.alerts.engine import Alert, AlertEngine, AlertSettings, RuleState
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.judging.verdict import Verdict

from tests.collector.alerts.recording import COLD_START_BLIP, SUSTAINED, Segment, replay

REPO = Path(__file__).resolve().parents[3]
START = 1_800_000_000.0
FAST, SLOW, TICKET = (rule.describe() for rule in DEFAULT_RULES)


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(REPO / "budget.yaml").budget


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


class Run:
    """An engine on a fake clock that records what it sends and each rule's states."""

    def __init__(self, budget: Budget, settings: AlertSettings | None = None) -> None:
        self.clock = Clock()
        self.sent: list[Alert] = []
        self.engine = AlertEngine(budget, self.sent.append, settings, clock=self.clock)
        self.history: dict[str, list[tuple[float, RuleState]]] = {}  # retrieval, per rule

    def at(self, second: float, verdicts: list[Verdict]) -> None:
        self.clock.now = START + second
        self.engine.on_verdicts(verdicts)
        for status in self.engine.rule_states():
            if status.stage != "retrieval":
                continue
            states = self.history.setdefault(status.track.rule.describe(), [])
            if not states or states[-1][1] is not status.track.state:
                states.append((second, status.track.state))

    def play(self, budget: Budget, segments: tuple[Segment, ...]) -> None:
        for second, verdicts in replay(budget, segments):
            self.at(second, verdicts)

    def changes(self) -> list[tuple[str, str, str, float]]:
        """(stage, severity, fired|resolved, second) of every change of state sent."""
        return [
            (
                a.stage,
                a.severity,
                "resolved" if a.resolved else "fired",
                (a.ends_at or a.starts_at).timestamp() - START,
            )
            for a in self.sent
            if not a.resent
        ]


def test_a_cold_start_blip_goes_pending_and_never_fires(budget: Budget) -> None:
    run = Run(budget)
    run.play(budget, COLD_START_BLIP)
    assert run.sent == []
    # Every rule did burn: pending from the 10th trace (min_traces) until good traffic won.
    assert run.history[FAST] == [
        (0, RuleState.INACTIVE),
        (9, RuleState.PENDING),
        (27, RuleState.INACTIVE),
    ]
    assert [state for _, state in run.history[SLOW]] == [
        RuleState.INACTIVE,
        RuleState.PENDING,
        RuleState.INACTIVE,
    ]


def test_without_for_the_same_blip_fires_and_resolves_within_a_minute(budget: Budget) -> None:
    """What the pending state prevents: a page at the 10th trace, gone a minute later."""
    eager = [replace(rule, for_s=0, keep_firing_s=0) for rule in DEFAULT_RULES]
    run = Run(budget, AlertSettings(rules=eager))
    run.play(budget, COLD_START_BLIP)
    page = [c for c in run.changes() if c[1] == "page"]
    assert page == [("retrieval", "page", "fired", 9), ("retrieval", "page", "resolved", 66)]


def test_a_sustained_burn_fires_once_after_for_and_resolves_once_after_the_hold(
    budget: Budget,
) -> None:
    run = Run(budget)
    run.play(budget, SUSTAINED)
    slow = run.history[SLOW]
    assert [state for _, state in slow] == [
        RuleState.INACTIVE,
        RuleState.PENDING,  # the cold start
        RuleState.INACTIVE,
        RuleState.PENDING,  # the overruns
        RuleState.FIRING,
        RuleState.INACTIVE,
    ]
    (_, _), _, _, (pending_at, _), (fired_at, _), (resolved_at, _) = slow
    assert fired_at - pending_at == 900  # `for: 15m`, to the second
    # 1 h of traffic a second at 100% over, 5% budget: the 14.4x page needs 72% over 1 h.
    assert [state for _, state in run.history[FAST]][-1] is RuleState.INACTIVE
    assert RuleState.FIRING not in [state for _, state in run.history[FAST]]
    ticket = run.history[TICKET]
    assert [state for _, state in ticket][-3:] == [
        RuleState.PENDING,
        RuleState.FIRING,
        RuleState.INACTIVE,
    ]
    assert ticket[-2][0] - ticket[-3][0] == 3 * 3600
    assert run.changes() == [
        ("retrieval", "page", "fired", fired_at),
        ("retrieval", "page", "resolved", resolved_at),
        ("retrieval", "ticket", "fired", ticket[-2][0]),
        ("retrieval", "ticket", "resolved", ticket[-1][0]),
    ]
    # The slow page stopped burning 15 minutes (its hold) before it resolved.
    states = run.engine.rule_states()
    assert all(s.track.state is RuleState.INACTIVE for s in states)


BURN = Segment(300, retrieval_extra_ms=30)
DIP = Segment(90)  # good traffic: the 5m window falls under 72% over after 85 s
BURN_AGAIN = Segment(300, per_second=3, retrieval_extra_ms=30)  # over 72% again 11 s on
CALM = Segment(900, per_second=10)


@pytest.mark.parametrize("hold_s", [120, 0])
def test_a_dip_shorter_than_the_hold_neither_resolves_nor_fires_again(
    budget: Budget, hold_s: float
) -> None:
    fast = replace(DEFAULT_RULES[0], for_s=60, keep_firing_s=hold_s)  # the fast rule alone
    run = Run(budget, AlertSettings(rules=[fast]))
    for second, verdicts in replay(budget, (BURN, DIP, BURN_AGAIN, CALM)):
        run.at(second, verdicts)
        if second == BURN.seconds + DIP.seconds - 1:
            (status,) = [s for s in run.engine.rule_states() if s.stage == "retrieval"]
            assert status.track.burning is False  # the dip took it under
    if hold_s:
        assert [c[2] for c in run.changes()] == ["fired", "resolved"]
        assert [state for _, state in run.history[FAST]] == [
            RuleState.INACTIVE,
            RuleState.PENDING,
            RuleState.FIRING,
            RuleState.INACTIVE,
        ]
    else:  # no hold: the dip resolves the page, and the burn pages anew
        assert [c[2] for c in run.changes()] == ["fired", "resolved", "fired", "resolved"]


def test_three_overruns_in_ten_traces_never_page(budget: Budget) -> None:
    # 3 of 10 over is a 6x burn, the slow page's threshold, as long as the windows keep them.
    ten = [v for _, batch in replay(budget, (Segment(1, 3, 30), Segment(1, 7))) for v in batch]
    for min_overruns, pages in ((5, False), (3, True)):
        run = Run(budget, AlertSettings(min_judged=10, min_overruns=min_overruns))
        run.at(0, ten)
        for second in range(10, 40 * 60, 10):
            run.at(second, [])  # no more traffic
        assert any(c[1] == "page" for c in run.changes()) is pages, min_overruns


def test_too_few_traces_in_the_windows_never_page(budget: Budget) -> None:
    run = Run(budget, AlertSettings(min_judged=10))
    run.play(budget, (Segment(9, retrieval_extra_ms=30), Segment(3600, per_second=0)))
    assert run.sent == []
    assert {state for _, state in run.history[FAST]} == {RuleState.INACTIVE}


def test_verdicts_delivered_again_with_another_status_change_nothing(budget: Budget) -> None:
    """Late spans that would change verdicts: a trace counts once, as first judged."""
    overruns = [v for _, batch in replay(budget, (BURN,)) for v in batch]
    good = [v for _, batch in replay(budget, (Segment(300),)) for v in batch]
    run = Run(budget)
    for second, verdict in enumerate(overruns):
        run.at(second, [verdict])
    fired = run.changes()
    assert [c[2] for c in fired] == ["fired"]  # the fast page, 2 m after the 10th overrun
    # The same trace ids come back judged good (say a late span shortened retrieval), and
    # bad again: were they counted, half the 5m window would be good and the page resolve.
    for second in range(300, 600):
        run.at(second, [good[second - 300], overruns[second - 300]])
    assert run.changes() == fired
    history = [state for _, state in run.history[FAST]]
    assert history == [RuleState.INACTIVE, RuleState.PENDING, RuleState.FIRING]


def test_rule_states_show_each_rules_burn_counts_and_traces(budget: Budget) -> None:
    run = Run(budget)
    run.play(budget, (Segment(60, retrieval_extra_ms=30),))
    states = {(s.stage, s.track.rule.describe()): s.to_dict() for s in run.engine.rule_states()}
    assert len(states) == (len(budget.stages) + 1) * len(DEFAULT_RULES)
    fast = states[("retrieval", FAST)]
    assert fast["state"] == "pending"
    assert fast["burning"] is True
    assert (fast["for"], fast["keep_firing_for"]) == ("2m", "2m")
    assert fast["since"] == "2027-01-15T08:00:09.000Z"  # the 10th trace
    assert fast["fires_at"] == "2027-01-15T08:02:09.000Z"
    assert fast["resolves_at"] is None
    assert fast["windows"] == {
        "long": {"window": "1h", "burn_rate": 20.0, "judged": 60, "over_limit": 60},
        "short": {"window": "5m", "burn_rate": 20.0, "judged": 60, "over_limit": 60},
    }
    assert fast["trace_ids"] == [f"{i:032x}" for i in range(55, 60)]
    assert states[("prefill", FAST)]["state"] == "inactive"
    assert states[("prefill", FAST)]["trace_ids"] == []


def test_a_reload_of_the_same_budget_rides_out_within_the_hold(budget: Budget) -> None:
    run = Run(budget)
    run.play(budget, (Segment(20 * 60, retrieval_extra_ms=30),))
    assert [c[2] for c in run.changes()] == ["fired"]
    run.engine.set_budget(budget)  # SIGHUP: the windows start over, the states stay
    overruns = replay(budget, (Segment(20 * 60, retrieval_extra_ms=30),))
    for second, verdicts in overruns:
        renamed = [replace(v, trace_id=f"{1:016x}{int(v.trace_id, 16):016x}") for v in verdicts]
        run.at(20 * 60 + second, renamed)
    assert [c[2] for c in run.changes()] == ["fired"]
