"""A load-test run's report from the collector's side: the verdicts carrying its run id,
put through the load tester's own `build_report`, so the numbers are report.json's.

The collector knows what the traces say, not what the client saw: client TTFT, the
schedule, inter-token latency and requests that never produced a trace are the load
tester's alone, and stay empty here. Time runs by judging time instead of schedule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from spanbudget.collector.budget import Budget
from spanbudget.collector.loadtest.client import RequestRecord
from spanbudget.collector.loadtest.report import RunInfo, build_report, request_row
from spanbudget.collector.semconv import LOADTEST_PHASE, LOADTEST_REQUEST_INDEX

__all__ = ["VerdictPages", "run_report", "run_verdicts"]

PAGE = 1000


class VerdictPages(Protocol):
    """What this needs of the verdict store: its newest-first listing with the cursor."""

    def query(
        self, *, run_id: str | None = ..., before: str | None = ..., limit: int = ...
    ) -> list[dict[str, Any]]: ...


def run_verdicts(
    store: VerdictPages, run_id: str, *, at_most: int = 100_000
) -> list[dict[str, Any]]:
    """Every stored verdict of the run, oldest first (paged through with `before`)."""
    found: list[dict[str, Any]] = []
    before: str | None = None
    while len(found) < at_most:
        page = store.query(run_id=run_id, before=before, limit=PAGE)
        found.extend(page)
        if len(page) < PAGE:
            break
        before = page[-1]["trace_id"]
    found.reverse()
    return found


def _index(verdict: Mapping[str, Any], fallback: int) -> int:
    value = verdict.get("attributes", {}).get(LOADTEST_REQUEST_INDEX)
    return value if isinstance(value, int) and not isinstance(value, bool) else fallback


def run_report(
    verdicts: Sequence[Mapping[str, Any]],
    budget: Budget,
    run_id: str,
    *,
    ui_url: str = "",
    jaeger_ui: str = "",
) -> dict[str, Any]:
    """The report of the run's verdicts (oldest first), as `build_report` computes it."""
    times = [datetime.fromisoformat(v["evaluated_at"]).timestamp() for v in verdicts]
    first = min(times, default=0.0)
    rows = []
    for i, (verdict, at) in enumerate(zip(verdicts, times, strict=True)):
        attributes = verdict.get("attributes", {})
        record = RequestRecord(
            index=_index(verdict, i),
            phase=str(attributes.get(LOADTEST_PHASE, "")),
            scheduled_s=at - first,  # judging time: the collector never sees the schedule
            trace_id=verdict["trace_id"],
        )
        row = request_row(record, verdict)
        row["status_code"] = 200 if verdict["status"] != "error" else 0
        rows.append(row)
    rows.sort(key=lambda row: row["index"])
    model = next(
        (
            str(v["attributes"]["gen_ai.request.model"])
            for v in verdicts
            if "gen_ai.request.model" in v.get("attributes", {})
        ),
        "",
    )
    info = RunInfo(
        run_id=run_id,
        target="",
        model=model,
        started_at=verdicts[0]["evaluated_at"] if verdicts else "",
        duration_s=(max(times) - first) if times else 0.0,
        config={},
        ui_url=ui_url,
        jaeger_ui=jaeger_ui,
    )
    report = build_report(rows, budget, info)
    for key in ("client_ttft_ms", "client_ttft_sched_ms", "itl_ms", "total_ms"):
        report[key] = None  # the client's measurements: only the load tester has them
    return report
