"""One record per request of a run: what the client saw, joined with the request's verdict.

The run's report is computed from these records alone, and `requests.csv` holds exactly
them (`files.write_results`, `files.read_results`), so `spanbudget report RUN_DIR` and any
reader of the CSV get the numbers of the original run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from ..context import why
from ..judging.verdict import Status, Verdict
from .client import RequestRecord

__all__ = ["RequestResult", "RequestVerdict", "StageTime", "join"]


class StageTime(NamedTuple):
    """One stage of one verdict: its ms (None when unmeasured) and its status."""

    ms: float | None
    status: Status


@dataclass(frozen=True, slots=True)
class RequestVerdict:
    """What a run keeps of one request's verdict: the statuses, the times, the blame."""

    status: Status
    ttft_ms: float | None
    total_status: Status  # the time to first token against its (effective) limit
    stages: Mapping[str, StageTime]  # by name, in the budget's order
    blame: tuple[str, ...] = ()
    context: str = ""  # the prompt and the engine's state around arrival (`context.why`)

    @classmethod
    def of(cls, verdict: Verdict) -> RequestVerdict:
        return cls(
            status=verdict.status,
            ttft_ms=verdict.ttft_ms,
            total_status=verdict.total_status,
            stages={s.name: StageTime(s.ms, s.status) for s in verdict.stages},
            blame=verdict.blame,
            context=why(verdict.attributes),
        )

    @property
    def timed(self) -> bool:
        """Its stage times are shares of the time to first token (DESIGN §5 rule 2): every
        verdict with a first token (not an `incomplete` one, nor a request that failed
        before its first token, whose window is the whole request instead)."""
        return self.ttft_ms is not None

    @property
    def within_limits(self) -> bool:
        return self.status in (Status.OK, Status.WARN)


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One request: the client's record and, if one arrived, its verdict."""

    request: RequestRecord
    verdict: RequestVerdict | None = None


def join(records: Sequence[RequestRecord], verdicts: Mapping[str, Verdict]) -> list[RequestResult]:
    """Each record with its verdict (by trace id), as the run's files keep them: times to
    the microsecond, and without what the files leave out (the per-chunk gaps)."""
    return [
        RequestResult(_as_kept(record), _verdict_of(verdicts.get(record.trace_id)))
        for record in records
    ]


def _verdict_of(verdict: Verdict | None) -> RequestVerdict | None:
    return None if verdict is None else RequestVerdict.of(verdict)


def _as_kept(record: RequestRecord) -> RequestRecord:
    return replace(
        record,
        scheduled_s=round(record.scheduled_s, 6),
        sent_s=round(record.sent_s, 6),
        ttft_ms=_r(record.ttft_ms),
        ttft_sched_ms=_r(record.ttft_sched_ms),
        itl_mean_ms=_r(record.itl_mean_ms),
        itl_p95_ms=_r(record.itl_p95_ms),
        total_ms=round(record.total_ms, 3),
        total_sched_ms=round(record.total_sched_ms, 3),
        chunk_gaps_ms=[],
    )


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
