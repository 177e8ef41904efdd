"""Per-key token buckets: `rate` tokens a second up to `burst`; a refusal says when to retry."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Decision", "TokenBucketLimiter"]

# Buckets idle this long are full again, so forgetting them changes nothing.
_IDLE_EVICT_SECONDS = 600.0


@dataclass(frozen=True)
class Decision:
    allowed: bool
    remaining: int
    retry_after_seconds: int


class TokenBucketLimiter:
    """One bucket per key; `clock` is injectable (monotonic seconds) for tests."""

    def __init__(
        self,
        rate_per_second: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate_per_second <= 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self._rate = rate_per_second
        self._burst = float(burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._last_sweep = clock()

    def acquire(self, key: str) -> Decision:
        now = self._clock()
        tokens, last = self._buckets.get(key, (self._burst, now))
        tokens = min(self._burst, tokens + (now - last) * self._rate)
        if tokens >= 1.0:
            tokens -= 1.0
            decision = Decision(True, int(tokens), 0)
        else:
            wait = (1.0 - tokens) / self._rate
            decision = Decision(False, 0, max(1, math.ceil(wait)))
        self._buckets[key] = (tokens, now)
        self._sweep(now)
        return decision

    def _sweep(self, now: float) -> None:
        if now - self._last_sweep < _IDLE_EVICT_SECONDS:
            return
        self._last_sweep = now
        stale = [k for k, (_, last) in self._buckets.items() if now - last > _IDLE_EVICT_SECONDS]
        for k in stale:
            del self._buckets[k]
