"""Garbage-collector settings for the collector process and for a load test's run.

What the collector allocates per span (records, dicts, verdicts) is freed by reference
counting: none of it forms cycles. With CPython's default thresholds the cycle collector
still runs every 700 allocations and, as the intake queue and the assembly buffer fill,
keeps rescanning every object they hold: a third of the collector's time at full load
(bench/pipeline.py measures it). `spanbudget collect` therefore freezes what start-up
made and collects the youngest generation less often; and where the compiled wire reader
is built, the intake's spans are never tracked at all (`span_records.untracked`). (A load
test's dispatcher needs short pauses rather than few: loadtest/idle_gc.py.)
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_for_throughput"]

YOUNG_THRESHOLD = 50_000  # allocations between collections of the youngest generation


def tune_for_throughput() -> None:
    """Collect once, move every object alive now out of the collector's sight (modules,
    budget, settings: they live as long as the process) and raise the first threshold."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
