"""Fault injection for drills: `x-spanbudget-delay: retrieval=30,prompt=15` (DESIGN §3);
each process acts on the keys it owns, and the header travels on unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from opentelemetry.trace import Span

from .attributes import FAULT_DELAY_MS

__all__ = ["DELAY_HEADER", "GATEWAY_STAGES", "NO_FAULTS", "FaultPlan", "parse_delay_header"]

DELAY_HEADER = "x-spanbudget-delay"
GATEWAY_STAGES = frozenset({"gateway", "retrieval", "prompt"})
# A drill is about tens of milliseconds; a typo must not park a request for minutes.
_MAX_DELAY_MS = 10_000.0


def parse_delay_header(value: str | None) -> dict[str, float]:
    """Parse `key=ms,key=ms`; malformed items are skipped rather than failing the request."""
    delays: dict[str, float] = {}
    if not value:
        return delays
    for item in value.split(","):
        key, sep, raw = item.partition("=")
        if not sep:
            continue
        try:
            ms = float(raw.strip())
        except ValueError:
            continue
        if ms > 0:
            delays[key.strip().lower()] = min(ms, _MAX_DELAY_MS)
    return delays


@dataclass(frozen=True)
class FaultPlan:
    """The delays this request asks the gateway to inject (empty when faults are off)."""

    delays_ms: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_header(cls, value: str | None, *, enabled: bool) -> FaultPlan:
        if not enabled:
            return cls()
        parsed = parse_delay_header(value)
        return cls({k: v for k, v in parsed.items() if k in GATEWAY_STAGES})

    async def inject(self, stage: str, span: Span) -> None:
        """Sleep for the stage's delay inside its (current) span, and mark the span."""
        ms = self.delays_ms.get(stage)
        if ms:
            span.set_attribute(FAULT_DELAY_MS, ms)
            await asyncio.sleep(ms / 1000.0)


NO_FAULTS = FaultPlan()  # a request without injected delays (the plan is immutable)
