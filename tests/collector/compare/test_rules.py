"""`--fail-on`: one syntax, parsed strictly; a threshold fires only on a detectable change
larger than it, and a percentile on too few requests is undecided, not passed silently."""

from __future__ import annotations

import pytest
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.compare import Rule, RuleError, Side, check_rules, compare, parse_rule

from tests.collector.compare.conftest import traces, verdicts


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("retrieval.p95>+10%", Rule("retrieval.p95>+10%", "retrieval", "p95", 10.0, "%")),
        ("ttft.p99 > +15ms", Rule("ttft.p99 > +15ms", "ttft", "p99", 15.0, "ms")),
        ("prefill.over>2pp", Rule("prefill.over>2pp", "prefill", "over", 2.0, "pp")),
        ("any.slower", Rule("any.slower", "any", "slower")),
        ("Retrieval.slower", Rule("Retrieval.slower", "retrieval", "slower")),
    ],
)
def test_rules_parse(text: str, rule: Rule) -> None:
    assert parse_rule(text) == rule


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("retrieval.p95>10", "not STAGE.STAT>.N UNIT"),
        ("retrieval.p90>+10%", "not STAGE.STAT>.N UNIT"),
        ("retrieval.over>+10%", "over takes pp"),
        ("retrieval.p95>+2pp", "p95 takes % or ms"),
        ("slower", "not STAGE.STAT>.N UNIT"),
    ],
)
def test_bad_rules_say_what_the_syntax_is(text: str, says: str) -> None:
    with pytest.raises(RuleError, match=says):
        parse_rule(text)


def _pair(budget: Budget, count: int, slow: float) -> tuple[Side, Side]:
    a = Side.of_verdicts("base", "traces", "a", verdicts(budget, traces(count, 1)))
    b = Side.of_verdicts(
        "candidate", "traces", "b", verdicts(budget, traces(count, 2, slow_retrieval=slow))
    )
    return a, b


def test_thresholds_fire_on_a_detectable_change_past_them(budget: Budget) -> None:
    comparison = compare(*_pair(budget, 300, 15))
    rules = [
        parse_rule(t)
        for t in (
            "retrieval.p50>+10%",
            "retrieval.p50>+40ms",
            "retrieval.p95>+5ms",
            "any.p50>+50%",
            "prefill.over>+1pp",
            "retrieval.slower",
        )
    ]
    fired = {(f.rule, f.stage) for f in check_rules(comparison, rules) if f.fired}
    assert fired == {
        ("retrieval.p50>+10%", "retrieval"),
        ("retrieval.p95>+5ms", "retrieval"),
        ("any.p50>+50%", "retrieval"),
        ("retrieval.slower", "retrieval"),
    }


def test_no_rule_fires_between_sides_drawn_alike(budget: Budget) -> None:
    comparison = compare(*_pair(budget, 300, 0))
    findings = check_rules(comparison, [parse_rule("any.slower"), parse_rule("any.p95>+10%")])
    assert len(findings) == 12
    assert not any(f.fired for f in findings)


def test_a_percentile_on_too_few_requests_is_undecided(budget: Budget) -> None:
    comparison = compare(*_pair(budget, 40, 15))
    (finding,) = check_rules(comparison, [parse_rule("retrieval.p99>+1ms")])
    assert finding.undecided
    assert not finding.fired
    assert "few values" in finding.detail


def test_a_rule_on_an_unknown_stage_is_refused(budget: Budget) -> None:
    comparison = compare(*_pair(budget, 20, 0))
    with pytest.raises(RuleError, match=r"no stage 'retreival'.*retrieval"):
        check_rules(comparison, [parse_rule("retreival.p95>+10%")])
