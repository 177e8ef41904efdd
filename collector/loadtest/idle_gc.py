"""Cycle collection moved into the dispatcher's idle time.

An open-loop dispatcher must send each request when it is due. CPython's cycle collector
runs whenever allocations pass a threshold, wherever that happens: a collection that lands
just before a send makes the send late by its length. The load tester's own HTTP client
(`spanbudget/http1.py`) leaves almost no cyclic garbage (0.04 objects a request, counted
over 1,000 at 200 requests/s; httpx left 48), but a target, a tracer or a future change
may leave more, and a run with the collector switched off would then grow without bound.

`IdleCollections` switches automatic collection off for the run and makes the same
collections itself, when the dispatcher has time to spare before its next send: the same
generations at the same thresholds, only moved into the gaps. Objects alive when the run
starts (modules, the schedule) are frozen first, so that no collection rescans them. If
no gap comes, because sends follow one another too closely, a generation is collected
anyway once its count reaches `FORCED_AFTER` times its threshold, so memory stays bounded
at any rate.
"""

from __future__ import annotations

import gc
from types import TracebackType

__all__ = ["FORCED_AFTER", "MIN_IDLE_S", "IdleCollections"]

MIN_IDLE_S = (0.001, 0.004, 0.010)  # per generation: a shorter gap is left to the sends
FORCED_AFTER = 20  # times a generation's threshold: collect it even without a gap


class IdleCollections:
    """A context for a run: inside it, collections happen only in `idle`."""

    def __init__(self) -> None:
        self._thresholds = gc.get_threshold()
        self._was_enabled = False
        self._froze = False
        self.collections = [0, 0, 0]  # made in idle time, per generation
        self.forced = 0  # made without a gap

    def __enter__(self) -> IdleCollections:
        self._thresholds = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        self._froze = gc.get_freeze_count() == 0
        if self._froze:  # a freeze someone made before is left to them
            gc.collect()
            gc.freeze()
        gc.disable()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._was_enabled:
            gc.enable()
        if self._froze:
            gc.unfreeze()

    def idle(self, seconds: float) -> None:
        """Collect what is due, if anything is, given `seconds` free before the next send.

        An older generation takes longer to scan (about 0.4 ms for the youngest, 1.4 ms for
        the middle one in bench/loadgen.py at 200 requests/s), so each waits for a gap of
        its own length, `MIN_IDLE_S`; meanwhile a younger one may be collected. Without a
        collection due this costs one `gc.get_count()`.
        """
        if not self._was_enabled:  # the process had chosen no automatic collection
            return
        counts = gc.get_count()
        if self._thresholds[0] == 0 or counts[0] <= self._thresholds[0]:
            return
        for generation in (2, 1, 0):
            threshold = self._thresholds[generation]
            if counts[generation] <= threshold:
                continue
            if seconds < MIN_IDLE_S[generation]:
                if counts[generation] <= threshold * FORCED_AFTER:
                    continue
                self.forced += 1
            gc.collect(generation)
            self.collections[generation] += 1
            return
