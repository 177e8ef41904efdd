"""Garbage-collector settings for the collector process and for a load test's run.

What the collector allocates per span (records, dicts, verdicts) is freed by reference
counting: none of it forms cycles. With CPython's default thresholds the cycle collector
still runs every 700 allocations and, as the intake queue and the assembly buffer fill,
keeps rescanning every object they hold: a third of the collector's time at full load
(bench/pipeline.py measures it). `spanbudget collect` therefore freezes what start-up
made, and collects the youngest generation between the judging core's steps
(`collect_between_steps`) rather than in the middle of one: a step of thousands of traces
holds each one's verdict, stage results and decisions until its sinks are done, and a
collection there rescanned them all (a collection every 50,000 allocations spent 78-84 ms
of a 1.6 s run of bench/pipeline.py's default configuration; between steps, 11-28 ms).
Where the compiled wire reader is built, the intake's spans are never tracked at all
(`span_records.untracked_each`). (A load test's dispatcher needs short pauses rather than few:
loadtest/idle_gc.py.)
"""

from __future__ import annotations

import gc

__all__ = ["BACKSTOP_THRESHOLD", "YOUNG_THRESHOLD", "collect_between_steps", "tune_for_throughput"]

YOUNG_THRESHOLD = 50_000  # net allocations of young objects between two collections
# The collector's own threshold, for a step that allocates more than this on its own (or a
# worker that stalls): the cycle collector as CPython runs it, rarely.
BACKSTOP_THRESHOLD = 1_000_000


def tune_for_throughput() -> None:
    """Collect once, move every object alive now out of the collector's sight (modules,
    budget, settings: they live as long as the process) and leave the youngest generation
    to `collect_between_steps`, CPython's own collections only a backstop."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(BACKSTOP_THRESHOLD, older, oldest)


def collect_between_steps() -> None:
    """Once `YOUNG_THRESHOLD` young objects have accumulated, collect the oldest generation
    whose count is over its threshold, as CPython picks it (the youngest, mostly). Called
    by the judging core's worker between steps (at least every half second); with
    CPython's default thresholds the count never gets there, and this does nothing."""
    young, older, oldest = gc.get_count()
    if young < YOUNG_THRESHOLD:
        return
    _, older_threshold, oldest_threshold = gc.get_threshold()
    gc.collect(2 if oldest >= oldest_threshold else 1 if older >= older_threshold else 0)
