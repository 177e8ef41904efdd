"""Each stage's share of the time to first token and of the blame: the definitions on hand
counted traces, on verdicts the evaluator gave, and per time slice."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Status, Verdict
from spanbudget.collector.stats import (
    UNATTRIBUTED,
    ShareRow,
    Slices,
    share_of,
    slices_for,
    wilson_interval,
)

from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
BUDGET = load_budget(REPO / "budget.yaml").budget
NAMES = ["network", "retrieval", "prefill"]
T0 = 1_764_936_000.0
OK, OVERRUN, ERROR = Status.OK, Status.OVERRUN, Status.ERROR


def judged(
    at: float,
    ttft: float | None,
    network: float | None,
    retrieval: float,
    prefill: float,
    status: Status = OK,
    blame: tuple[str, ...] = (),
) -> ShareRow:
    stages = {"network": network, "retrieval": retrieval, "prefill": prefill}
    return ShareRow(at, ttft, stages, status, blame)


# Five traces: two overruns blamed on retrieval first, one on prefill, one overrun that
# blames no stage (the total overran on unattributed time), a failed request that names a
# stage (not an overrun: no blame counted), a server-only trace (network unmeasured) and
# one without a first token (its stage times are not TTFT time).
TRACES = [
    judged(T0 + 1, 100.0, 10.0, 20.0, 70.0),
    judged(T0 + 2, 200.0, 10.0, 90.0, 100.0, OVERRUN, ("retrieval", "prefill")),
    judged(T0 + 3, 150.0, 10.0, 60.0, 80.0, OVERRUN, ("retrieval",)),
    judged(T0 + 61, 190.0, 10.0, 20.0, 160.0, OVERRUN, ("prefill",)),
    judged(T0 + 62, 300.0, 10.0, 20.0, 100.0, OVERRUN, ()),  # 170 ms unattributed
    judged(T0 + 63, 100.0, None, 20.0, 79.0, ERROR, ("prefill",)),  # 1 ms unattributed
    judged(T0 + 64, None, 50.0, 50.0, 300.0, Status.INCOMPLETE),
]


def test_time_shares_are_summed_ms_over_summed_ttft_and_add_up_to_one() -> None:
    share = share_of(TRACES, names=NAMES)
    ttft = 100 + 200 + 150 + 190 + 300 + 100
    assert share.traces == 6  # the one without a first token left out
    assert share.ttft_ms == ttft
    assert share.stage("network").ms == 50  # unmeasured in one: adds nothing there
    assert share.stage("network").measured == 5
    assert share.stage("retrieval").time_share == pytest.approx(230 / ttft)
    assert share.stage("prefill").time_share == pytest.approx(589 / ttft)
    assert share.stage(UNATTRIBUTED).ms == pytest.approx(171)
    assert [s.name for s in share.stages] == [*NAMES, UNATTRIBUTED]
    assert math.fsum(s.time_share or 0.0 for s in share.stages) == pytest.approx(1.0, abs=1e-12)


def test_each_overrun_gives_its_one_unit_of_blame_to_its_first_blamed_stage() -> None:
    share = share_of(TRACES, names=NAMES)
    assert share.overruns == 4  # the failed request is not an overrun
    blamed = {s.name: s.blamed for s in share.stages}
    assert blamed == {"network": 0, "retrieval": 2, "prefill": 1, UNATTRIBUTED: 1}
    retrieval = share.stage("retrieval")
    assert retrieval.blame_share == 0.5
    assert (retrieval.blame_low, retrieval.blame_high) == wilson_interval(2, 4)
    assert retrieval.wide  # 4 overruns say little
    assert math.fsum(s.blame_share or 0.0 for s in share.stages) == 1.0


def test_the_sentence_names_the_stage_with_most_blame_and_says_when_few_overran() -> None:
    share = share_of(TRACES, names=NAMES)
    assert share.sentence("in the last 15 min") == (
        "in the last 15 min, retrieval took 22 % of the time to first token and 50 % of the "
        "blame (only 4 overruns: 95 % interval 15–85 %)"
    )
    calm = share_of(TRACES[:1], names=NAMES)
    assert calm.sentence("in run r1") == (
        "in run r1, prefill took 70 % of the time to first token and no trace overran"
    )
    nothing = share_of([], names=NAMES)
    assert nothing.traces == nothing.overruns == 0
    assert nothing.stage("prefill").time_share is None
    assert nothing.sentence("in the last hour").endswith(
        "no trace with a time to first token was judged"
    )


def test_many_overruns_give_a_narrow_interval() -> None:
    many = [
        judged(T0, 200.0, 10.0, 90.0, 100.0, OVERRUN, ("retrieval",) if i % 5 else ("prefill",))
        for i in range(400)
    ]
    share = share_of(many, names=NAMES)
    retrieval = share.stage("retrieval")
    assert retrieval.blame_share == 0.8
    assert not retrieval.wide
    assert share.sentence("this week").endswith("and 80 % of the blame (of 400 overruns)")


def test_per_slice_shares_use_the_traces_of_each_slice() -> None:
    slices = Slices(T0, 60.0, 2, per_slice=1)
    share = share_of(TRACES, names=NAMES, slices=slices)
    assert share.slice_width_s == 60.0
    first, second = share.slices
    assert (first.start, second.start) == (T0, T0 + 60)
    assert (first.traces, first.overruns, second.traces, second.overruns) == (3, 2, 3, 2)
    assert first.time_share["retrieval"] == pytest.approx(170 / 450)
    assert first.blame_share["retrieval"] == 1.0
    assert second.time_share["prefill"] == pytest.approx(339 / 590)
    assert second.blame_share == {
        "network": 0.0,
        "retrieval": 0.0,
        "prefill": 0.5,
        UNATTRIBUTED: 0.5,
    }
    empty = share_of(TRACES[:3], names=NAMES, slices=slices).slices[1]
    assert empty.traces == 0
    assert empty.time_share["prefill"] is None
    assert empty.blame_share["prefill"] is None
    as_json = share.to_dict()
    assert as_json["slices"][1]["blame_share"]["prefill"] == 0.5
    assert as_json["stages"][1]["blame_interval"] == list(wilson_interval(2, 4))


def _verdicts() -> list[Verdict]:
    evaluator = Evaluator(BUDGET)
    made = []
    for i in range(60):
        spans = rag_trace(
            trace_id=f"{i + 1:032x}",
            retrieval=(i * 7) % 45,
            prefill=(i * 11) % 40,
            client_root=i % 4 != 0,
            marks=i % 13 != 0,
        ).spans
        at = datetime.fromtimestamp(T0 + i * 10, UTC)
        verdict = evaluator.evaluate(spans, evaluated_at=at)
        assert verdict is not None
        made.append(verdict)
    return made


def test_verdicts_of_the_evaluator_add_up_as_their_stage_times_do() -> None:
    verdicts = _verdicts()
    share = share_of(verdicts, names=BUDGET.stage_names())
    timed = [v for v in verdicts if v.ttft_ms is not None]
    total = sum(v.ttft_ms or 0.0 for v in timed)
    for stage in BUDGET.stage_names():
        summed = sum(v.stage(stage).ms or 0.0 for v in timed)
        assert share.stage(stage).ms == pytest.approx(summed)
        assert share.stage(stage).time_share == pytest.approx(summed / total)
    # The verdicts' own unattributed time (DESIGN §5 rule 5: stages + unattributed = TTFT).
    assert share.stage(UNATTRIBUTED).ms == pytest.approx(
        sum(v.unattributed_ms for v in timed), abs=0.05
    )
    overruns = [v for v in verdicts if v.status is Status.OVERRUN]
    assert share.overruns == len(overruns) > 10
    for stage in BUDGET.stage_names():
        firsts = sum(1 for v in overruns if v.blame[:1] == (stage,))
        assert share.stage(stage).blamed == firsts
    # Names default to the verdicts' stages in their (budget) order.
    assert [s.name for s in share_of(verdicts).stages] == [*BUDGET.stage_names(), UNATTRIBUTED]
    # Over time, on the overview's slicing: every trace in a slice, none lost.
    cut = slices_for(T0, T0 + 590, len(verdicts), per_slice=10)
    sliced = share_of(verdicts, names=BUDGET.stage_names(), slices=cut)
    assert sum(s.traces for s in sliced.slices) == share.traces
    assert sum(s.overruns for s in sliced.slices) == share.overruns


@pytest.mark.parametrize("most", [1, 4, 36, 360])
def test_the_slices_keep_to_the_most_asked_for(most: int) -> None:
    cut = slices_for(T0, T0 + 7200, 100_000, per_slice=59, max_slices=most)
    assert cut.count <= most + 1  # one more when the last trace sits on an edge
    assert cut.start <= T0 < T0 + 7200 < cut.end
    assert len(cut.starts()) == cut.count
    with pytest.raises(ValueError, match="max_slices"):
        slices_for(T0, T0 + 1, 1, per_slice=1, max_slices=0)
