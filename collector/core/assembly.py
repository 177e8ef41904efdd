"""Tail-based trace assembly, like the OTel Collector's tail-sampling processor.

Spans are held per trace until the trace is due: its root has arrived and `decision_wait`
has passed since its last span, or its age passes `max_age`. Everything is bounded. After
a restart that found traces in flight, `hold` keeps every trace a while longer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from .held import HeldSpan

__all__ = ["REVISION", "AddResult", "Assembly", "AssemblySettings", "DueTrace"]

REVISION = "revision"  # the reason of a trace due again: late spans within the horizon


class AssemblySettings(BaseModel):
    """Tail-based assembly's bounds, as `spanbudget collect` reads them (its settings'
    `.assembly`; the field names are the flat ones of the environment and the options)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decision_wait_seconds: float = Field(default=2.0, ge=0)
    max_trace_age_seconds: float = Field(default=30.0, gt=0)
    max_traces: int = Field(default=50_000, gt=0)
    max_spans_per_trace: int = Field(default=1_000, gt=0)
    max_buffered_spans: int = Field(default=500_000, gt=0)  # all held traces together
    decided_memory: int = Field(default=200_000, gt=0)  # trace ids remembered to spot late spans
    # Late spans within this long after a trace's verdict revise it (0: never); the decided
    # traces' spans are kept that long, at most revise_spans spans in all.
    revise_seconds: float = Field(default=60.0, ge=0)
    revise_spans: int = Field(default=100_000, ge=0)


@dataclass(slots=True)
class _Pending:
    trace_id: str
    first: float
    last: float
    spans: dict[str, HeldSpan] = field(default_factory=dict)
    has_root: bool = False
    lost: dict[str, int] | None = None  # spans it lost before judging, by reason


@dataclass(slots=True)
class DueTrace:
    """A trace ready for judgement. `reason`: complete, max_age, evicted, flush, or
    revision (judged before; late spans came within the revision horizon)."""

    trace_id: str
    spans: list[HeldSpan]
    reason: str
    lost: dict[str, int] | None = None  # spans lost on the way, by reason: judge as damaged


@dataclass(slots=True)
class _Settled:
    """A decided trace's spans, kept for the revision horizon."""

    trace_id: str
    decided: float
    spans: dict[str, HeldSpan]
    lost: dict[str, int] | None
    last_late: float = 0.0  # when its latest late span came


@dataclass(slots=True)
class AddResult:
    """What `Assembly.add` did besides holding spans, for the core to count and route."""

    duplicates: int = 0
    over_trace_limit: int = 0
    late: list[HeldSpan] = field(default_factory=list)
    evicted: list[DueTrace] = field(default_factory=list)


class Assembly:
    """Holds spans by trace until each trace is due. Not thread-safe: one worker owns it.

    Bounds: `max_traces` traces and `max_spans` spans in all (the oldest traces are evicted
    first), `max_spans_per_trace` spans in one trace (the rest are refused). Trace ids
    already decided are remembered (bounded, oldest forgotten first) so their stragglers
    come back as late.
    """

    def __init__(
        self,
        *,
        decision_wait: float,
        max_age: float,
        max_traces: int,
        max_spans_per_trace: int,
        decided_memory: int,
        max_spans: int | None = None,
        revise_seconds: float = 0.0,
        revise_spans: int = 0,
    ) -> None:
        self.decision_wait = decision_wait
        self.max_age = max_age
        self.max_traces = max_traces
        self.max_spans_per_trace = max_spans_per_trace
        self.decided_memory = decided_memory
        self.max_spans = max_spans if max_spans is not None else max_traces * max_spans_per_trace
        self._by_first: OrderedDict[str, _Pending] = OrderedDict()  # age order, for max_age
        self._by_last: OrderedDict[str, _Pending] = OrderedDict()  # quiet order, for the wait
        self._decided: OrderedDict[str, None] = OrderedDict()
        self.span_count = 0
        # Revision: decided traces' spans kept `revise_seconds` (at most `revise_spans`
        # spans in all); a late span within that joins them, and once quiet for the
        # decision wait the trace is due again, as a revision.
        self.revise_seconds = revise_seconds
        self.revise_spans = revise_spans
        self._settled: OrderedDict[str, _Settled] = OrderedDict()  # decision order
        self._settled_spans = 0
        self._revising: OrderedDict[str, _Settled] = OrderedDict()  # by latest late span
        self.hold_until = float("-inf")  # `hold`: nothing is complete before this

    def hold(self, until: float) -> None:
        """Judge no trace as complete before `until`; `max_age` still bounds each.

        For a restart that found traces in flight: the senders retry what it refused, each
        request on its own back-off, so a trace's root may come back before its children,
        and a root with the decision wait over says nothing about what is still on its way.
        A later `until` extends the hold, an earlier one changes nothing."""
        self.hold_until = max(self.hold_until, until)

    @classmethod
    def from_settings(cls, settings: AssemblySettings) -> Assembly:
        return cls(
            decision_wait=settings.decision_wait_seconds,
            max_age=settings.max_trace_age_seconds,
            max_traces=settings.max_traces,
            max_spans_per_trace=settings.max_spans_per_trace,
            decided_memory=settings.decided_memory,
            max_spans=settings.max_buffered_spans,
            revise_seconds=settings.revise_seconds,
            revise_spans=settings.revise_spans,
        )

    def __len__(self) -> int:
        return len(self._by_first)

    def add(
        self,
        spans: Sequence[HeldSpan],
        now: float,
        *,
        local_roots: Collection[str] = (),
        lost: Mapping[str, Mapping[str, int]] | None = None,
    ) -> AddResult:
        """Hold `spans`. A span counts as the trace's root when it has no parent or its id
        is in `local_roots` (in-process use: a span whose parent lives in another process).
        `lost` (trace id -> reason -> count) are spans of these traces refused before
        they got here; they, and spans over the per-trace bound, mark a trace damaged.
        """
        result = AddResult()
        by_first, by_last, decided = self._by_first, self._by_last, self._decided
        limit = self.max_spans_per_trace
        for item in spans:
            span = item.span
            trace_id = span.trace_id
            trace = by_first.get(trace_id)
            if trace is None:
                if trace_id in decided:
                    result.late.append(item)
                    self._late(item, now)
                    continue
                trace = _Pending(trace_id, now, now)
                by_first[trace_id] = trace
                if len(by_first) > self.max_traces:
                    result.evicted.append(self._decide(next(iter(by_first)), "evicted"))
            elif span.span_id in trace.spans:
                result.duplicates += 1
                continue
            elif len(trace.spans) >= limit:
                result.over_trace_limit += 1
                _lose(trace, "trace_span_limit", 1)
                continue
            trace.spans[span.span_id] = item
            if span.parent_span_id is None or span.span_id in local_roots:
                trace.has_root = True
            trace.last = now
            self.span_count += 1
            try:
                by_last.move_to_end(trace_id)
            except KeyError:
                by_last[trace_id] = trace
        for trace_id, reasons in (lost or {}).items():
            trace = by_first.get(trace_id)
            if trace is None:
                if trace_id in decided:
                    continue  # decided already: too late to say
                trace = _Pending(trace_id, now, now)  # every span of it refused so far
                by_first[trace_id] = trace
            for reason, n in reasons.items():
                _lose(trace, reason, n)
        while self.span_count > self.max_spans and len(by_first) > 1:
            result.evicted.append(self._decide(next(iter(by_first)), "evicted"))
        return result

    def due(self, now: float) -> list[DueTrace]:
        """Traces whose time has come, oldest first; they leave the buffer."""
        out: list[DueTrace] = []
        by_last = self._by_last
        wait_cutoff = now - self.decision_wait
        while by_last and now >= self.hold_until:
            trace = next(iter(by_last.values()))
            if trace.last > wait_cutoff:
                break
            if trace.has_root:
                out.append(self._decide(trace.trace_id, "complete", now))
            else:
                # Quiet but rootless: only max_age decides it now, unless more spans come.
                del by_last[trace.trace_id]
        age_cutoff = now - self.max_age
        by_first = self._by_first
        while by_first:
            trace = next(iter(by_first.values()))
            if trace.first > age_cutoff:
                break
            out.append(self._decide(trace.trace_id, "max_age", now))
        self._forget_settled(now - self.revise_seconds)
        revising = self._revising
        while revising:
            settled = next(iter(revising.values()))
            if settled.last_late > wait_cutoff:
                break
            del revising[settled.trace_id]
            out.append(self._revision(settled))
        return out

    def flush(self, *, rootless: bool = True) -> list[DueTrace]:
        """Every held trace, now (shutdown, force_flush), and every revision waiting.

        `rootless=False` leaves the traces whose root has not come held, undecided: for a
        caller whose spans someone else keeps (the intake journal, which offers them again
        at the next start, where the rest of each trace joins them)."""
        out = [
            self._decide(trace_id, "flush")
            for trace_id, trace in list(self._by_first.items())
            if rootless or trace.has_root
        ]
        out += [self._revision(settled) for settled in self._revising.values()]
        self._revising.clear()
        return out

    def remember(self, trace_ids: Iterable[str]) -> None:
        """Count these traces as decided already (judged before a restart, say): their
        stragglers come back as late instead of being judged again."""
        decided = self._decided
        for trace_id in trace_ids:
            decided[trace_id] = None
            if len(decided) > self.decided_memory:
                decided.popitem(last=False)

    def next_deadline(self) -> float | None:
        """The earliest time at which `due` could return something, if anything is held."""
        deadlines = []
        if self._by_last:
            quiet = next(iter(self._by_last.values())).last + self.decision_wait
            deadlines.append(max(quiet, self.hold_until))
        if self._by_first:
            deadlines.append(next(iter(self._by_first.values())).first + self.max_age)
        if self._revising:
            deadlines.append(next(iter(self._revising.values())).last_late + self.decision_wait)
        return min(deadlines) if deadlines else None

    def _decide(self, trace_id: str, reason: str, now: float | None = None) -> DueTrace:
        """Take a trace out to be judged; with `now`, keep its spans for revision."""
        trace = self._by_first.pop(trace_id)
        self._by_last.pop(trace_id, None)
        self.span_count -= len(trace.spans)
        decided = self._decided
        decided[trace_id] = None
        if len(decided) > self.decided_memory:
            decided.popitem(last=False)
        if now is not None and self.revise_seconds > 0 and self.revise_spans > 0:
            self._settled[trace_id] = _Settled(trace_id, now, trace.spans, trace.lost)
            self._settled_spans += len(trace.spans)
            while self._settled_spans > self.revise_spans and self._settled:
                self._pop_settled()
        return DueTrace(trace_id, list(trace.spans.values()), reason, trace.lost)

    def _late(self, item: HeldSpan, now: float) -> None:
        """A late span of a trace still kept for revision joins it, to be judged again."""
        settled = self._settled.get(item.span.trace_id)
        if settled is None or item.span.span_id in settled.spans:
            return
        if len(settled.spans) >= self.max_spans_per_trace:
            return
        settled.spans[item.span.span_id] = item
        self._settled_spans += 1
        settled.last_late = now
        self._revising[settled.trace_id] = settled
        self._revising.move_to_end(settled.trace_id)

    def _forget_settled(self, cutoff: float) -> None:
        settled = self._settled
        while settled and next(iter(settled.values())).decided <= cutoff:
            self._pop_settled()

    def _pop_settled(self) -> None:
        _, gone = self._settled.popitem(last=False)
        self._settled_spans -= len(gone.spans)  # a revision waiting keeps its own reference

    def _revision(self, settled: _Settled) -> DueTrace:
        return DueTrace(settled.trace_id, list(settled.spans.values()), REVISION, settled.lost)


def _lose(trace: _Pending, reason: str, n: int) -> None:
    if trace.lost is None:
        trace.lost = {}
    trace.lost[reason] = trace.lost.get(reason, 0) + n
