"""Injected trouble for drills and load tests: per-request delays, stalls, errors, drops.

`x-spanbudget-delay: queue=50,prefill=40,kv_transfer=40` (ms) is honoured only when faults
are on (`kv_transfer` only on a disaggregated engine, which moves KV caches); the
scheduled stalls and the error/drop shares are explicit settings of their own.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ServiceError
from ..faults import DELAY_HEADER, parse_delay_header

__all__ = [
    "DELAY_HEADER",
    "ENGINE_DELAY_KEYS",
    "FaultError",
    "RequestFaults",
    "StallSchedule",
    "TroubleMaker",
    "engine_delays",
    "parse_stall",
]

ENGINE_DELAY_KEYS = ("queue", "prefill", "kv_transfer")


class FaultError(ServiceError, ValueError):
    """A fault setting that cannot be understood (the CLI turns it into a usage error)."""


def engine_delays(header: str | None) -> dict[str, float]:
    """The engine's keys of the delay header, in seconds; other stages' keys are ignored.

    Parsed (and capped) as the gateway parses it: one header, one reading of it.
    """
    delays_ms = parse_delay_header(header)
    return {key: delays_ms[key] / 1e3 for key in ENGINE_DELAY_KEYS if key in delays_ms}


def parse_stall(spec: str) -> tuple[float, float]:
    """`AT:MS` (for example `10:500` or `10s:500ms`): at AT seconds after start, stall MS ms."""
    at, sep, ms = spec.partition(":")
    try:
        if not sep:
            raise ValueError(spec)
        at_seconds = float(at.strip().removesuffix("s"))
        stall_ms = float(ms.strip().removesuffix("ms"))
    except ValueError:
        raise FaultError(f"stall {spec!r}: expected AT:MS, for example 10:500") from None
    if not (math.isfinite(at_seconds) and math.isfinite(stall_ms)):
        raise FaultError(f"stall {spec!r}: AT and MS must be finite numbers")
    if at_seconds < 0 or stall_ms <= 0:
        raise FaultError(f"stall {spec!r}: AT must be >= 0 and MS > 0")
    return at_seconds, stall_ms / 1e3


class StallSchedule:
    """Stall windows: from AT for MS the engine does no work, as when a GPU or its host hiccups.

    A step under way at AT takes MS longer; a step due to start inside the window starts when
    it ends; a window the engine spends idle costs nothing. Every running request sees it.
    """

    def __init__(self, stalls: Iterable[tuple[float, float]] = ()) -> None:
        self._pending = sorted(stalls)

    def __call__(self, elapsed_seconds: float, step_seconds: float) -> float:
        """How much longer a step starting at `elapsed_seconds` (from the engine's start)
        and modelled at `step_seconds` takes, through the windows it meets."""
        start, end = elapsed_seconds, elapsed_seconds + step_seconds
        while self._pending and self._pending[0][0] < end:
            at, length = self._pending.pop(0)
            if at + length <= start:
                continue  # passed while the engine was idle
            if at <= start:
                start, end = at + length, end + (at + length - start)
            else:
                end += length
        return end - (elapsed_seconds + step_seconds)


@dataclass(frozen=True)
class RequestFaults:
    """What happens to one request: fail at once with 500, or drop after some tokens."""

    fail: bool = False
    drop_after_tokens: int | None = None


class TroubleMaker:
    """Draws each request's fate from seeded shares, so a load test is reproducible."""

    def __init__(self, *, error_rate: float = 0.0, drop_rate: float = 0.0, seed: int = 0) -> None:
        for name, rate in (("error_rate", error_rate), ("drop_rate", drop_rate)):
            if not 0.0 <= rate <= 1.0:
                raise FaultError(f"{name} must lie in [0, 1], got {rate}")
        self.error_rate = error_rate
        self.drop_rate = drop_rate
        self._rng = random.Random(f"faults:{seed}")

    def draw(self, output_tokens: int) -> RequestFaults:
        if not (self.error_rate or self.drop_rate):
            return RequestFaults()
        roll = self._rng.random()
        if roll < self.error_rate:
            return RequestFaults(fail=True)
        if roll < self.error_rate + self.drop_rate:
            # At least one token goes out, so the drop happens mid-stream.
            return RequestFaults(drop_after_tokens=self._rng.randint(1, max(1, output_tokens - 1)))
        return RequestFaults()
