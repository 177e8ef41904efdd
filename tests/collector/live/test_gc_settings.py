"""The collector's GC settings: start-up objects frozen, the youngest generation collected
between the judging core's steps, CPython's own collections a backstop; cyclic garbage is
still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from spanbudget.collector.live.gc_settings import (
    BACKSTOP_THRESHOLD,
    YOUNG_THRESHOLD,
    collect_between_steps,
    tune_for_throughput,
)


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restore_gc")
def test_tuning_freezes_and_raises_the_first_threshold() -> None:
    older = gc.get_threshold()[1:]
    tune_for_throughput()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (BACKSTOP_THRESHOLD, *older)

    class Cycle:
        other: object = None

    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2


class Cycle:
    other: object = None


def cycles(count: int) -> weakref.WeakSet[Cycle]:
    """`count` pairs of objects that only the cycle collector frees, watched."""
    watched: weakref.WeakSet[Cycle] = weakref.WeakSet()
    for _ in range(count):
        a, b = Cycle(), Cycle()
        a.other, b.other = b, a
        watched.add(a)
    return watched


@pytest.mark.usefixtures("restore_gc")
def test_between_steps_young_garbage_is_collected_once_there_is_enough() -> None:
    tune_for_throughput()
    few = cycles(100)
    collect_between_steps()
    assert len(few) == 100  # not yet: a collection for a few objects is not worth its scan
    many = cycles(YOUNG_THRESHOLD // 2)  # two objects a pair
    collect_between_steps()
    assert len(few) == len(many) == 0
    assert gc.get_count()[0] < YOUNG_THRESHOLD


@pytest.mark.usefixtures("restore_gc")
def test_with_cpythons_thresholds_it_leaves_collecting_to_cpython() -> None:
    gc.set_threshold(700, 10, 10)
    gc.collect()
    before = gc.get_stats()
    collect_between_steps()
    assert gc.get_stats() == before
