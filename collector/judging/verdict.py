"""A trace's verdict against a budget, and its JSON form (DESIGN §6)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from .. import json_text

__all__ = ["SEVERITY", "StageResult", "Status", "Verdict", "new_stage_result", "to_json"]


class Status(enum.Enum):
    """Statuses of a stage, of the total, and of a whole trace."""

    OK = "ok"
    WARN = "warn"
    OVERRUN = "overrun"
    ABSENT = "absent"  # stage: no matching span, when_absent: zero
    UNMEASURED = "unmeasured"  # stage: no matching span, when_absent: unmeasured
    ERROR = "error"  # trace: a span on the critical path failed
    INCOMPLETE = "incomplete"  # trace: no first-token mark
    # A trace with no LLM call in it (a model list, a health check): nothing to judge on
    # time to first token. Counted and listed, never in the SLO, never a failure.
    NOT_APPLICABLE = "not_applicable"
    # A trace whose LLM calls were not streamed: its response came whole. Left out of the
    # TTFT SLO (the budget's `non_streamed: skip`), its response time reported beside.
    NOT_STREAMED = "not_streamed"

    # Members are singletons: identity hashing is correct and much cheaper than Enum's.
    __hash__ = object.__hash__

    @property
    def severity(self) -> int:
        """Order for "worst of": absent and unmeasured count as ok; a trace not judged on
        time to first token (`not_applicable`, `not_streamed`) below that."""
        return SEVERITY[self]

    @property
    def in_slo(self) -> bool:
        """Whether a trace of this status counts in the SLO's share (and its denominator)."""
        return self not in _OUTSIDE_SLO


# Read on every verdict the alert rules count: members looked up once, not through the class.
_OUTSIDE_SLO = (Status.NOT_APPLICABLE, Status.NOT_STREAMED)

SEVERITY = {
    Status.NOT_APPLICABLE: -1,
    Status.NOT_STREAMED: -1,
    Status.OK: 0,
    Status.ABSENT: 0,
    Status.UNMEASURED: 0,
    Status.WARN: 1,
    Status.OVERRUN: 2,
    Status.INCOMPLETE: 3,
    Status.ERROR: 4,
}


@dataclass(frozen=True, slots=True)
class StageResult:
    name: str
    ms: float | None
    target_ms: float
    limit_ms: float
    status: Status
    breakdown: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ms": self.ms,
            "target_ms": self.target_ms,
            "limit_ms": self.limit_ms,
            "status": self.status.value,
            "breakdown": dict(self.breakdown),
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one trace, exactly what its JSON form holds (`to_dict`, `from_dict`)."""

    trace_id: str
    budget: str
    status: Status
    ttft_ms: float | None
    total_target_ms: float
    total_limit_ms: float
    total_status: Status
    stages: tuple[StageResult, ...]
    unattributed_ms: float
    blame: tuple[str, ...]
    overrun_ms: float
    skew_adjusted_ms: float
    attributes: Mapping[str, str | int | float | bool]
    evaluated_at: datetime
    # Spans the trace lost before it was judged, by reason (`span_too_large`: refused at
    # intake; `trace_span_limit`: over the per-trace bound; `missing_parent`: spans whose
    # parent is not in the trace, besides its root); None when it arrived whole.
    damaged: Mapping[str, int] | None = None
    # Where the first token was read: `source` (event, attribute, anchored attribute,
    # first child, vllm, response end), `mark` (what was read), `span` (the span's name)
    # and `exact` (false for an estimate); None without a first token.
    first_token: Mapping[str, str | bool] | None = None
    # The instrumentation recognised in the trace whose preset judged it (`openllmetry`,
    # ...); None when the budget in effect judged it as its own.
    instrumentation: str | None = None
    # A request not streamed: from its start to its LLM call's whole response, in ms.
    response_ms: float | None = None

    def stage(self, name: str) -> StageResult:
        for result in self.stages:
            if result.name == name:
                return result
        raise KeyError(name)

    def as_damaged(self, lost: Mapping[str, int]) -> Verdict:
        """This verdict of a trace that lost spans: its numbers are kept (they are what the
        spans that came show) but it is `incomplete`, blames no stage and has no overrun,
        since a missing span may have held the time (DESIGN §6, `damaged`)."""
        return replace(
            self,
            status=Status.INCOMPLETE,
            blame=(),
            overrun_ms=0.0,
            damaged={**(self.damaged or {}), **lost},
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, its mappings copies of the verdict's own (the caller's to change)."""
        return _document(self, self.evaluated_at.isoformat(timespec="milliseconds"), dict)

    def to_json(self) -> str:
        """`to_dict` as compact JSON (as the collector stores every verdict)."""
        return to_json([self])[0]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        """Rebuild a verdict from its JSON form, as stored or served (keys beyond it, such
        as the API's `spans`, are ignored). Raises KeyError, TypeError or ValueError."""
        total = data["total"]
        return cls(
            trace_id=data["trace_id"],
            budget=data["budget"],
            status=Status(data["status"]),
            ttft_ms=data["ttft_ms"],
            total_target_ms=total["target_ms"],
            total_limit_ms=total["limit_ms"],
            total_status=Status(total["status"]),
            stages=tuple(
                StageResult(
                    name=s["name"],
                    ms=s["ms"],
                    target_ms=s["target_ms"],
                    limit_ms=s["limit_ms"],
                    status=Status(s["status"]),
                    breakdown=s.get("breakdown", {}),
                )
                for s in data["stages"]
            ),
            unattributed_ms=data["unattributed_ms"],
            blame=tuple(data["blame"]),
            overrun_ms=data["overrun_ms"],
            skew_adjusted_ms=data["skew_adjusted_ms"],
            attributes=data.get("attributes", {}),
            evaluated_at=datetime.fromisoformat(data["evaluated_at"]),
            damaged=data.get("damaged") or None,
            first_token=data.get("first_token"),
            instrumentation=data.get("instrumentation"),
            response_ms=data.get("response_ms"),
        )


# A constructor for the evaluator's hot path (six per trace). A frozen dataclass's __init__
# sets each field through object.__setattr__: 1.3 µs for a StageResult. Filling the slots
# through their descriptors makes the same object, frozen as before, in 0.5 µs
# (tests/collector/judging/test_verdict_constructors.py holds it to the class's own constructor).
_new = object.__new__
_stage_slots = tuple(StageResult.__dict__[f].__set__ for f in StageResult.__slots__)


def new_stage_result(
    name: str,
    ms: float | None,
    target_ms: float,
    limit_ms: float,
    status: Status,
    breakdown: Mapping[str, float],
) -> StageResult:
    """`StageResult(...)` with every field given, made faster."""
    result: StageResult = _new(StageResult)
    s_name, s_ms, s_target, s_limit, s_status, s_breakdown = _stage_slots
    s_name(result, name)
    s_ms(result, ms)
    s_target(result, target_ms)
    s_limit(result, limit_ms)
    s_status(result, status)
    s_breakdown(result, breakdown)
    return result


def to_json(verdicts: Iterable[Verdict]) -> list[str]:
    """Each verdict's `to_json`, as the collector stores a batch of them: the same text,
    in two thirds of the time (the document is built without the copies `to_dict` makes
    for its callers, and an instant the batch shares is formatted once: judged together,
    verdicts share one). tests/collector/judging/test_verdict_json.py holds it to
    `to_dict`."""
    out: list[str] = []
    instant: datetime | None = None
    at = ""
    for verdict in verdicts:
        if verdict.evaluated_at is not instant:
            instant = verdict.evaluated_at
            at = instant.isoformat(timespec="milliseconds")
        out.append(json_text.dumps(_document(verdict, at, _plain)).decode())
    return out


def _document(
    verdict: Verdict, evaluated_at: str, plain: Callable[[Mapping[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """The verdict's JSON form (DESIGN §6), `evaluated_at` formatted, its mappings as
    `plain` gives them: copies (`to_dict`), or themselves where they are dicts (`to_json`,
    which only writes them)."""
    document = {
        "trace_id": verdict.trace_id,
        "budget": verdict.budget,
        "status": verdict.status._value_,
        "ttft_ms": verdict.ttft_ms,
        "total": {
            "target_ms": verdict.total_target_ms,
            "limit_ms": verdict.total_limit_ms,
            "status": verdict.total_status._value_,
        },
        "stages": [
            {  # as `StageResult.to_dict`, inline: six a verdict on the collector's hot path
                "name": stage.name,
                "ms": stage.ms,
                "target_ms": stage.target_ms,
                "limit_ms": stage.limit_ms,
                "status": stage.status._value_,
                "breakdown": plain(stage.breakdown),
            }
            for stage in verdict.stages
        ],
        "unattributed_ms": verdict.unattributed_ms,
        "blame": list(verdict.blame),
        "overrun_ms": verdict.overrun_ms,
        "skew_adjusted_ms": verdict.skew_adjusted_ms,
        "attributes": plain(verdict.attributes),
        "evaluated_at": evaluated_at,
    }
    if verdict.damaged:
        document["damaged"] = dict(verdict.damaged)
    if verdict.first_token is not None:
        document["first_token"] = dict(verdict.first_token)
    if verdict.instrumentation is not None:
        document["instrumentation"] = verdict.instrumentation
    if verdict.response_ms is not None:
        document["response_ms"] = verdict.response_ms
    return document


def _plain(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A dict as JSON writers take one (another mapping, copied)."""
    return mapping if type(mapping) is dict else dict(mapping)
