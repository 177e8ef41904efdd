"""A load-test run's report from the collector's side: the verdicts carrying its run id,
put through the load tester's own `build_report`, so the numbers are report.json's.

The collector knows what the traces say, not what the client saw: client TTFT, the
schedule, inter-token latency and requests that never produced a trace are the load
tester's alone, and stay empty here. Time runs by judging time instead of schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from spanbudget.common.semconv import GEN_AI_REQUEST_MODEL

from ..annotations import LOADTEST_PHASE, LOADTEST_REQUEST_INDEX
from ..budget.model import Budget
from ..judging.verdict import Status, Verdict
from ..loadtest.client import RequestRecord
from ..loadtest.records import join
from ..loadtest.report import build_report
from ..loadtest.report_model import Report, RunInfo
from ..stats import StageSummary

__all__ = ["VerdictPages", "run_report", "run_verdicts"]

PAGE = 1000
_NOTHING = StageSummary.of_times(())


class VerdictPages(Protocol):
    """What this needs of the verdict store: its newest-first listing with the cursor."""

    def query(
        self, *, run_id: str | None = ..., before: str | None = ..., limit: int = ...
    ) -> list[dict[str, Any]]: ...


def run_verdicts(store: VerdictPages, run_id: str, *, at_most: int = 100_000) -> list[Verdict]:
    """Every stored verdict of the run, oldest first (paged through with `before`)."""
    found: list[Verdict] = []
    before: str | None = None
    while len(found) < at_most:
        page = store.query(run_id=run_id, before=before, limit=PAGE)
        found.extend(Verdict.from_dict(served) for served in page)
        if len(page) < PAGE:
            break
        before = page[-1]["trace_id"]
    found.reverse()
    return found


def _index(verdict: Verdict, fallback: int) -> int:
    value = verdict.attributes.get(LOADTEST_REQUEST_INDEX)
    return value if isinstance(value, int) and not isinstance(value, bool) else fallback


def run_report(
    verdicts: Sequence[Verdict],
    budget: Budget,
    run_id: str,
    *,
    ui_url: str = "",
    jaeger_ui: str = "",
) -> Report:
    """The report of the run's verdicts (oldest first), as `build_report` computes it."""
    times = [v.evaluated_at.timestamp() for v in verdicts]
    first = min(times, default=0.0)
    records = sorted(
        (
            RequestRecord(
                index=_index(verdict, i),
                phase=str(verdict.attributes.get(LOADTEST_PHASE, "")),
                scheduled_s=at - first,  # judging time: the collector never sees the schedule
                status_code=0 if verdict.status is Status.ERROR else 200,
                trace_id=verdict.trace_id,
            )
            for i, (verdict, at) in enumerate(zip(verdicts, times, strict=True))
        ),
        key=lambda record: record.index,
    )
    model = next(
        (
            str(v.attributes[GEN_AI_REQUEST_MODEL])
            for v in verdicts
            if GEN_AI_REQUEST_MODEL in v.attributes
        ),
        "",
    )
    info = RunInfo(
        run_id=run_id,
        target="",
        model=model,
        started_at=verdicts[0].evaluated_at.isoformat(timespec="milliseconds") if verdicts else "",
        duration_s=(max(times) - first) if times else 0.0,
        config={},
        ui_url=ui_url,
        jaeger_ui=jaeger_ui,
    )
    report = build_report(join(records, {v.trace_id: v for v in verdicts}), budget, info)
    # The client's measurements: only the load tester has them.
    return replace(
        report,
        client_ttft=_NOTHING,
        client_ttft_sched=_NOTHING,
        itl=_NOTHING,
        request_total=_NOTHING,
    )
