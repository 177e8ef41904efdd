"""The load-test report as a record, and its JSON form (`report.json`).

Per-stage figures are `StageSummary`s, with the keys `/api/summary` serves them under.
`Report.from_dict` reads back what `to_dict` wrote, and raises KeyError, TypeError or
ValueError on anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..stats import StageSummary

__all__ = ["PhaseLine", "Report", "RunInfo", "SlowTrace", "StageLine", "WindowLine"]


@dataclass(frozen=True, slots=True)
class RunInfo:
    run_id: str
    target: str
    model: str
    started_at: str  # RFC 3339
    duration_s: float  # from the first send to the last response
    config: Mapping[str, Any]
    ui_url: str = ""  # the collector's web UI, for links
    jaeger_ui: str = ""  # Jaeger's UI, for links


@dataclass(frozen=True, slots=True)
class StageLine:
    """One budget stage's allocation and what the run's traces spent on it."""

    name: str
    target_ms: float
    limit_ms: float
    summary: StageSummary

    def to_dict(self) -> dict[str, Any]:
        head = {"name": self.name, "target_ms": self.target_ms, "limit_ms": self.limit_ms}
        return {**head, **self.summary.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StageLine:
        return cls(
            str(data["name"]),
            float(data["target_ms"]),
            float(data["limit_ms"]),
            StageSummary.from_dict(data),
        )


@dataclass(frozen=True, slots=True)
class PhaseLine:
    """One phase of the schedule (nominal, burst, ...): requests, and each stage's p95."""

    name: str
    requests: int
    within_limits: float  # share of the phase's requests within every limit
    stage_p95_ms: Mapping[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PhaseLine:
        return cls(
            str(data["name"]),
            int(data["requests"]),
            float(data["within_limits"]),
            dict(data["stage_p95_ms"]),
        )


@dataclass(frozen=True, slots=True)
class WindowLine:
    """Each stage's p95 over one window of scheduled time (`t_s` to `t_s` + the window)."""

    t_s: float
    requests: int
    stage_p95_ms: Mapping[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return {"t_s": self.t_s, "requests": self.requests, **self.stage_p95_ms}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WindowLine:
        stages = {k: v for k, v in data.items() if k not in ("t_s", "requests")}
        return cls(float(data["t_s"]), int(data["requests"]), stages)


@dataclass(frozen=True, slots=True)
class SlowTrace:
    trace_id: str
    ttft_ms: float
    status: str
    blame: tuple[str, ...]
    ui_url: str
    jaeger_url: str
    context: str = ""  # the prompt and the engine's state around arrival, when known

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "blame": list(self.blame)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SlowTrace:
        return cls(
            str(data["trace_id"]),
            float(data["ttft_ms"]),
            str(data["status"]),
            tuple(data["blame"]),
            str(data["ui_url"]),
            str(data["jaeger_url"]),
            str(data.get("context", "")),  # absent from reports written before it
        )


@dataclass(frozen=True, slots=True)
class Report:
    """Everything `report.json` holds: the run's facts, the budget it was judged by, and
    per stage, per phase and over time what the traces spent."""

    info: RunInfo
    budget_name: str
    total_target_ms: float
    total_limit_ms: float
    slo_objective: float
    requests: int
    errors: int
    joined: int  # requests with a verdict
    by_status: Mapping[str, int]  # verdicts by status
    within_limits: float  # share of all requests within every limit
    goodput_rps: float
    ttft: StageSummary  # from the verdicts, against the total limit
    client_ttft: StageSummary  # as the load tester saw it, from the actual send
    client_ttft_sched: StageSummary  # from the scheduled send
    itl: StageSummary
    request_total: StageSummary
    stages: tuple[StageLine, ...]
    phases: tuple[PhaseLine, ...]
    stage_p95_over_time: tuple[WindowLine, ...]
    slowest: tuple[SlowTrace, ...]

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    @property
    def missing(self) -> int:
        return self.requests - self.joined

    @property
    def slo_met(self) -> bool:
        return self.requests > 0 and self.within_limits >= self.slo_objective

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self.info),
            "budget": {
                "name": self.budget_name,
                "total": {"target_ms": self.total_target_ms, "limit_ms": self.total_limit_ms},
                "slo_objective": self.slo_objective,
            },
            "requests": self.requests,
            "errors": self.errors,
            "error_rate": self.error_rate,
            "verdicts": {
                "joined": self.joined,
                "missing": self.missing,
                "by_status": dict(self.by_status),
            },
            "slo": {
                "objective": self.slo_objective,
                "within_limits": self.within_limits,
                "met": self.slo_met,
            },
            "goodput_rps": self.goodput_rps,
            "ttft": self.ttft.to_dict(),
            "client_ttft": self.client_ttft.to_dict(),
            "client_ttft_sched": self.client_ttft_sched.to_dict(),
            "itl": self.itl.to_dict(),
            "request_total": self.request_total.to_dict(),
            "stages": [stage.to_dict() for stage in self.stages],
            "phases": [phase.to_dict() for phase in self.phases],
            "stage_p95_over_time": [point.to_dict() for point in self.stage_p95_over_time],
            "slowest": [trace.to_dict() for trace in self.slowest],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        budget = data["budget"]
        info = {f.name: data[f.name] for f in fields(RunInfo)}
        return cls(
            info=RunInfo(**{**info, "duration_s": float(info["duration_s"])}),
            budget_name=str(budget["name"]),
            total_target_ms=float(budget["total"]["target_ms"]),
            total_limit_ms=float(budget["total"]["limit_ms"]),
            slo_objective=float(budget["slo_objective"]),
            requests=int(data["requests"]),
            errors=int(data["errors"]),
            joined=int(data["verdicts"]["joined"]),
            by_status=dict(data["verdicts"]["by_status"]),
            within_limits=float(data["slo"]["within_limits"]),
            goodput_rps=float(data["goodput_rps"]),
            ttft=StageSummary.from_dict(data["ttft"]),
            client_ttft=StageSummary.from_dict(data["client_ttft"]),
            client_ttft_sched=StageSummary.from_dict(data["client_ttft_sched"]),
            itl=StageSummary.from_dict(data["itl"]),
            request_total=StageSummary.from_dict(data["request_total"]),
            stages=tuple(StageLine.from_dict(s) for s in data["stages"]),
            phases=tuple(PhaseLine.from_dict(p) for p in data["phases"]),
            stage_p95_over_time=tuple(WindowLine.from_dict(w) for w in data["stage_p95_over_time"]),
            slowest=tuple(SlowTrace.from_dict(s) for s in data["slowest"]),
        )
