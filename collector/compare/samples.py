"""What one side of a comparison holds: per request, each stage's exclusive ms and status
and the time to first token, whatever it was read from (a run's `requests.csv`, verdicts of
trace files or of the collector)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..annotations import LOADTEST_PHASE
from ..judging.verdict import Status, Verdict
from ..loadtest.records import RequestResult

__all__ = ["TTFT", "Limits", "Sample", "Side"]

TTFT = "ttft"  # the name the time to first token goes by in tables, rules and JSON


@dataclass(frozen=True, slots=True)
class Sample:
    """One request: each stage's (ms, status) by name, and the TTFT's. A stage the trace
    did not measure has ms None and counts for nothing."""

    trace_id: str
    phase: str
    stages: Mapping[str, tuple[float | None, Status]]

    def ms(self, stage: str) -> float | None:
        got = self.stages.get(stage)
        return None if got is None else got[0]

    def over(self, stage: str) -> bool:
        got = self.stages.get(stage)
        return got is not None and got[1] is Status.OVERRUN


@dataclass(frozen=True, slots=True)
class Limits:
    """A stage's target and limit, as the side's verdicts state them (for charts)."""

    target_ms: float
    limit_ms: float


@dataclass(frozen=True, slots=True)
class Side:
    """A labelled set of requests: `kind` says what was read (`run`, `traces`,
    `collector run`, `collector window`), `source` where from."""

    label: str
    kind: str
    source: str
    samples: Sequence[Sample]
    stage_names: Sequence[str]  # in the budget's order, TTFT not among them
    limits: Mapping[str, Limits] = field(default_factory=dict)
    left_out: int = 0  # requests without a timed verdict (failed, incomplete, not judged)

    @classmethod
    def of_results(
        cls, label: str, source: str, results: Iterable[RequestResult], *, phase: str | None = None
    ) -> Side:
        """A load-test run's records. A request without a verdict, or whose verdict has no
        first token (`incomplete`: its stage times are shares of another window), is left
        out, as the run's own report leaves it out."""
        samples: list[Sample] = []
        names: list[str] = []
        left_out = 0
        for result in results:
            if phase is not None and result.request.phase != phase:
                continue
            verdict = result.verdict
            if verdict is None or not verdict.timed:
                left_out += 1
                continue
            stages = {name: (t.ms, t.status) for name, t in verdict.stages.items()}
            for name in verdict.stages:
                if name not in names:
                    names.append(name)
            stages[TTFT] = (verdict.ttft_ms, verdict.total_status)
            samples.append(Sample(result.request.trace_id, result.request.phase, stages))
        return cls(label, "run", source, samples, names, left_out=left_out)

    @classmethod
    def of_verdicts(
        cls,
        label: str,
        kind: str,
        source: str,
        verdicts: Iterable[Verdict],
        *,
        phase: str | None = None,
    ) -> Side:
        """Verdicts judged from trace files or served by the collector; `phase` keeps
        those of a load test's phase (`loadtest.phase` on the root span)."""
        samples: list[Sample] = []
        names: list[str] = []
        limits: dict[str, Limits] = {}
        left_out = 0
        for verdict in verdicts:
            got_phase = str(verdict.attributes.get(LOADTEST_PHASE, ""))
            if phase is not None and got_phase != phase:
                continue
            if verdict.ttft_ms is None:  # no first token: failed before it, or incomplete
                left_out += 1
                continue
            stages: dict[str, tuple[float | None, Status]] = {}
            for stage in verdict.stages:
                stages[stage.name] = (stage.ms, stage.status)
                if stage.name not in names:
                    names.append(stage.name)
                limits.setdefault(stage.name, Limits(stage.target_ms, stage.limit_ms))
            stages[TTFT] = (verdict.ttft_ms, verdict.total_status)
            limits.setdefault(TTFT, Limits(verdict.total_target_ms, verdict.total_limit_ms))
            samples.append(Sample(verdict.trace_id, got_phase, stages))
        return cls(label, kind, source, samples, names, limits, left_out)

    def with_limits(self, limits: Mapping[str, Limits]) -> Side:
        """This side with the limits a budget states, where its own records have none."""
        return Side(
            self.label,
            self.kind,
            self.source,
            self.samples,
            self.stage_names,
            {**limits, **self.limits},
            self.left_out,
        )

    def values(self, stage: str) -> tuple[list[float], list[bool]]:
        """The measured ms of `stage` and, for each, whether it was over its limit."""
        ms: list[float] = []
        over: list[bool] = []
        for sample in self.samples:
            value = sample.ms(stage)
            if value is not None:
                ms.append(value)
                over.append(sample.over(stage))
        return ms, over

    def slowest(self, stage: str, count: int = 5) -> list[tuple[str, float]]:
        """The trace ids with the longest times of `stage`, longest first."""
        timed = [(s.trace_id, s.ms(stage)) for s in self.samples]
        ranked = sorted(((t, ms) for t, ms in timed if ms is not None), key=lambda p: -p[1])
        return ranked[:count]
