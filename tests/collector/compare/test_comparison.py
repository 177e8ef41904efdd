"""The comparison finds a slowed stage with its interval, leaves the others alone, and says
`few` where a percentile rests on too few requests."""

from __future__ import annotations

import pytest
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.compare import Change, CompareSettings, Side, compare
from spanbudget.collector.judging.verdict import Status

from tests.collector.compare.conftest import traces, verdicts


def _side(budget: Budget, label: str, seed: int, *, slow: float = 0.0, count: int = 80) -> Side:
    judged = verdicts(budget, traces(count, seed, slow_retrieval=slow))
    return Side.of_verdicts(label, "traces", label, judged)


def test_a_slowed_stage_is_found_with_its_interval_and_the_rest_unchanged(
    budget: Budget,
) -> None:
    base = _side(budget, "base", 1)
    slow = _side(budget, "candidate", 2, slow=15)
    result = compare(base, slow)
    retrieval = result.stage("retrieval")
    assert retrieval.change is Change.SLOWER
    p50 = retrieval.stats["p50"]
    assert 12 < p50.difference < 18
    assert p50.interval.low > 8
    assert p50.interval.high < 22
    # TTFT moves one for one, but 15 ms is under 10 % of its 170: no verdict of its own
    ttft = result.stage("ttft")
    assert ttft.stats["p50"].interval.low > 0
    assert 10 < ttft.stats["p50"].difference < 20
    assert ttft.change is Change.NONE
    for name in ("network", "gateway", "prompt", "prefill"):
        assert result.stage(name).change is Change.NONE, name
    assert result.changed(Change.SLOWER) == ["retrieval"]
    # six intervals (five stages and TTFT) share the 95 %
    assert result.interval_confidence == pytest.approx(1 - 0.05 / 6)


def test_two_sides_drawn_alike_show_no_change(budget: Budget) -> None:
    result = compare(_side(budget, "base", 3), _side(budget, "candidate", 4))
    assert result.changed(Change.SLOWER) == []
    assert result.changed(Change.FASTER) == []


def test_faster_is_the_mirror_of_slower(budget: Budget) -> None:
    result = compare(_side(budget, "base", 5, slow=15), _side(budget, "candidate", 6))
    assert result.stage("retrieval").change is Change.FASTER
    assert result.stage("retrieval").stats["p50"].interval.high < 0


def test_the_same_seed_gives_the_same_intervals_and_another_seed_others(budget: Budget) -> None:
    base, candidate = _side(budget, "base", 7), _side(budget, "candidate", 8, slow=5)
    first = compare(base, candidate, CompareSettings(seed=11, resamples=500))
    again = compare(base, candidate, CompareSettings(seed=11, resamples=500))
    other = compare(base, candidate, CompareSettings(seed=12, resamples=500))
    assert first.to_dict() == again.to_dict()
    assert first.to_dict()["stages"] != other.to_dict()["stages"]
    assert first.to_dict()["settings"] == {
        "confidence": 0.95,
        "resamples": 500,
        "seed": 11,
        "primary": "p50",
        "min_effect_ms": 2.0,
        "min_effect_share": 0.1,
    }


def test_a_change_below_the_minimum_effect_is_no_change(budget: Budget) -> None:
    base, candidate = _side(budget, "base", 9, count=300), _side(budget, "c", 10, count=300)
    strict = CompareSettings(min_effect_ms=0, min_effect_share=0)
    shifted = Side.of_verdicts(
        "c", "traces", "c", verdicts(budget, traces(300, 10, slow_retrieval=1.5))
    )
    # 1.5 ms more retrieval on 300 requests is detectable, but under the 2 ms minimum
    assert compare(base, shifted, strict).stage("retrieval").change is Change.SLOWER
    assert compare(base, shifted).stage("retrieval").change is Change.NONE
    assert compare(base, candidate).stage("retrieval").change is Change.NONE


def test_percentiles_on_too_few_requests_are_few(budget: Budget) -> None:
    result = compare(_side(budget, "base", 1, count=40), _side(budget, "c", 2, count=40))
    stats = result.stage("retrieval").stats
    assert not stats["p50"].few
    assert stats["p95"].few
    assert stats["p99"].few
    rests_on_p95 = compare(
        _side(budget, "base", 1, count=40),
        _side(budget, "c", 2, count=40, slow=15),
        CompareSettings(primary="p95"),
    )
    assert rests_on_p95.stage("retrieval").change is Change.FEW


def test_a_stage_one_side_never_measured_is_not_compared(budget: Budget) -> None:
    base = _side(budget, "base", 1, count=30)
    server_only = Side.of_verdicts(
        "c",
        "traces",
        "c",
        [
            v
            for v in verdicts(budget, traces(30, 2))
            if v.stage("network").status is not Status.UNMEASURED
        ],
    )
    stripped = Side(
        "c",
        "traces",
        "c",
        [
            type(s)(s.trace_id, s.phase, {k: v for k, v in s.stages.items() if k != "network"})
            for s in server_only.samples
        ],
        server_only.stage_names,
    )
    result = compare(base, stripped)
    assert result.stage("network").change is Change.UNMEASURED
    assert result.stage("network").stats == {}
    assert result.stage("retrieval").change is Change.NONE
