"""Garbage-collector settings for the collector process and for a load test's run.

What the collector allocates per span (records, dicts, verdicts) is freed by reference
counting: none of it forms cycles. With CPython's default thresholds the cycle collector
still runs every 700 allocations and, as the intake queue and the assembly buffer fill,
keeps rescanning every object they hold: a third of the collector's time at full load
(bench/pipeline.py measures it). `spanbudget collect` therefore freezes what start-up
made and collects the youngest generation less often. A load test's dispatcher does the
same while a run sends (`few_collections`): a full collection would stall it for
milliseconds.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["YOUNG_THRESHOLD", "few_collections", "tune_for_throughput"]

YOUNG_THRESHOLD = 50_000  # allocations between collections of the youngest generation


def tune_for_throughput() -> None:
    """Collect once, move every object alive now out of the collector's sight (modules,
    budget, settings: they live as long as the process) and raise the first threshold."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """`tune_for_throughput` for the time of a `with` block, restored afterwards; a freeze
    someone else made before is left to them."""
    thresholds = gc.get_threshold()
    frozen_before = gc.get_freeze_count() > 0
    if not frozen_before:
        gc.collect()
        gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if not frozen_before:
            gc.unfreeze()
