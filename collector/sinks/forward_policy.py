"""Which decided traces the forwarder sends on: all of them (the default), or the traces
whose verdict status is in a keep set plus a share of the rest chosen by trace id.

The share is chosen as OpenTelemetry's `TraceIdRatioBased` sampler chooses: a trace is in
when the low 64 bits of its id fall below `rate * 2**64`. The choice depends on nothing
but the trace id, so every collector replica, every restart and an SDK sampling at the
same ratio agree on it, and a trace's late spans follow it. A trace kept for its status
is remembered (as many as the core remembers decided traces), so that its late spans
follow it too; once forgotten, they are treated as the rest, sampled by trace id.

Traces not judged count by what happened to them: `skipped` (no span matched a stage)
and `dropped` (evicted from a full buffer, or the evaluation failed) may be named in the
keep set like a status; otherwise they are part of the rest.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # settings import this module: keep it light
    from ..core.decisions import DecidedTrace

__all__ = [
    "KEEP_NAMES",
    "SAMPLED_OUT",
    "ForwardPolicy",
    "parse_keep",
    "sample_bound",
    "sampled",
]

# The statuses a trace's verdict can have (DESIGN §6), then the traces left unjudged.
KEEP_NAMES = ("ok", "warn", "overrun", "error", "incomplete", "skipped", "dropped")
ALL, STATUS, SAMPLED, SAMPLED_OUT = "all", "status", "sampled", "sampled_out"
_LOW_64 = (1 << 64) - 1


def parse_keep(text: str) -> frozenset[str]:
    """`overrun,error` → {"overrun", "error"}; an empty text keeps nothing by status."""
    names = frozenset(part.strip().lower() for part in text.split(",") if part.strip())
    unknown = sorted(names.difference(KEEP_NAMES))
    if unknown:
        raise ValueError(
            f"unknown status {', '.join(map(repr, unknown))}; choose from {', '.join(KEEP_NAMES)}"
        )
    return names


def sample_bound(rate: float) -> int:
    """The bound below which a trace id's low 64 bits are sampled in, as `TraceIdRatioBased`."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"a sampling rate is between 0 and 1, got {rate!r}")
    return round(rate * (1 << 64))


def sampled(trace_id: str, bound: int) -> bool:
    """Whether the trace with this hex id is in the sampled share that `bound` sets."""
    try:
        low = int(trace_id[-16:], 16) & _LOW_64
    except ValueError:  # not hex: no reader makes such an id, but never raise here
        low = int.from_bytes(hashlib.blake2b(trace_id.encode(), digest_size=8).digest())
    return low < bound


class ForwardPolicy:
    """Decides, per trace and per late span, whether it is forwarded and why.

    `decide` and `decide_late` return the reason: `all` (no policy: everything goes),
    `status` (its status is in the keep set), `sampled` (in the sampled share), or
    `sampled_out` (not forwarded). They run on the core's worker thread; `remember` is
    for before it starts.
    """

    def __init__(
        self,
        keep: Collection[str] | None = None,
        sample: float | None = None,
        *,
        memory: int = 200_000,
    ) -> None:
        self.everything = keep is None and sample is None
        self.keep = parse_keep(",".join(keep or ()))
        self.sample = 0.0 if sample is None else sample
        self.bound = sample_bound(self.sample)
        self.memory = memory
        self._kept: OrderedDict[str, None] = OrderedDict()  # trace ids kept by status

    def reasons(self) -> tuple[str, ...]:
        """Every reason `decide` and `decide_late` can give."""
        return (ALL,) if self.everything else (STATUS, SAMPLED, SAMPLED_OUT)

    def describe(self) -> str:
        if self.everything:
            return "every trace"
        kept = ",".join(name for name in KEEP_NAMES if name in self.keep) or "none"
        return f"keep {kept}, sample {self.sample:g} of the rest"

    def decide(self, trace: DecidedTrace) -> str:
        if self.everything:
            return ALL
        if trace.judged is not None:
            name = trace.judged.verdict.status.value
        else:
            name = "skipped" if trace.dropped is None else "dropped"
        if name in self.keep:
            self._remember(trace.trace_id)
            return STATUS
        return SAMPLED if sampled(trace.trace_id, self.bound) else SAMPLED_OUT

    def decide_late(self, trace_id: str) -> str:
        """A span of a trace decided before: its trace's decision, while remembered."""
        if self.everything:
            return ALL
        if trace_id in self._kept:
            return STATUS
        return SAMPLED if sampled(trace_id, self.bound) else SAMPLED_OUT

    def remember(self, statuses: Iterable[tuple[str, str]]) -> None:
        """(trace id, verdict status) of traces judged before a restart, oldest first."""
        if self.everything or not self.keep:
            return
        for trace_id, status in statuses:
            if status in self.keep:
                self._remember(trace_id)

    def _remember(self, trace_id: str) -> None:
        kept = self._kept
        kept[trace_id] = None
        if len(kept) > self.memory:
            kept.popitem(last=False)
