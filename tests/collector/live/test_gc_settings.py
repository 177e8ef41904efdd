"""The collector's GC settings: start-up objects frozen, the youngest generation collected
less often; cyclic garbage is still collected."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from spanbudget.collector.live.gc_settings import YOUNG_THRESHOLD, tune_for_throughput


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
    assert gc.get_threshold() == (YOUNG_THRESHOLD, *older)

    class Cycle:
        other: object = None

    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    del a, b
    assert gc.collect() >= 2
