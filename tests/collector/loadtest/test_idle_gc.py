"""A run's cycle collections happen in the dispatcher's gaps, and still happen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from spanbudget.collector.loadtest.idle_gc import FORCED_AFTER, MIN_IDLE_S, IdleCollections


class Node:
    other: object = None


def cycle() -> weakref.ref[Node]:
    """Two objects that only reference counting cannot free; a reference to one of them."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def young_threshold() -> Iterator[int]:
    thresholds = gc.get_threshold()
    gc.set_threshold(700, *thresholds[1:])
    gc.enable()
    yield 700
    gc.set_threshold(*thresholds)
    gc.enable()


def test_no_automatic_collection_inside_and_all_restored_after(young_threshold: int) -> None:
    assert gc.get_freeze_count() == 0
    with IdleCollections():
        assert not gc.isenabled()
        assert gc.get_freeze_count() > 0  # what lived before the run is not rescanned
        ref = cycle()
        kept = [[] for _ in range(young_threshold * 3)]  # past the threshold: no collection
        assert ref() is not None
        del kept
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert ref() is None


def test_a_gap_collects_the_garbage_that_is_due(young_threshold: int) -> None:
    with IdleCollections() as collections:
        ref = cycle()
        collections.idle(1.0)
        assert ref() is not None, "nothing was due yet: the youngest generation is small"
        kept = [[] for _ in range(young_threshold * 2)]
        collections.idle(1.0)
        assert ref() is None
        assert collections.collections[0] == 1
        assert collections.forced == 0
        del kept


def test_a_short_gap_is_left_alone_until_the_garbage_piles_up(young_threshold: int) -> None:
    with IdleCollections() as collections:
        ref = cycle()
        kept = [[] for _ in range(young_threshold * 2)]
        collections.idle(MIN_IDLE_S[0] / 2)
        assert ref() is not None
        kept += [[] for _ in range(young_threshold * FORCED_AFTER)]
        collections.idle(MIN_IDLE_S[0] / 2)
        assert ref() is None
        assert collections.forced == 1
        del kept


def test_a_process_without_automatic_collection_keeps_it_off(young_threshold: int) -> None:
    gc.disable()
    with IdleCollections() as collections:
        ref = cycle()
        kept = [[] for _ in range(young_threshold * FORCED_AFTER * 2)]
        collections.idle(1.0)
        assert ref() is not None
        del kept
    assert not gc.isenabled()
    gc.collect()


def test_an_older_generation_waits_for_a_gap_long_enough_to_scan_it(young_threshold: int) -> None:
    middle = gc.get_threshold()[1]
    with IdleCollections() as collections:
        for _ in range(middle + 1):  # the middle generation is due from now on
            gc.collect(0)
        kept = [[] for _ in range(young_threshold * 2)]
        collections.idle((MIN_IDLE_S[0] + MIN_IDLE_S[1]) / 2)
        assert collections.collections == [1, 0, 0]
        kept += [[] for _ in range(young_threshold * 2)]
        collections.idle(MIN_IDLE_S[1])
        assert collections.collections == [1, 1, 0]
        del kept
