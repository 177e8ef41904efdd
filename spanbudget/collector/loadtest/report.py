"""The load-test report, computed from one row per request (pure: rows in, report out).

`rows` are what `requests.csv` holds: the client's measurements of a request joined with
its verdict. Computing everything from the rows means `spanbudget report RUN_DIR` and
any reader of the CSV get exactly the numbers of the original run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spanbudget.collector.budget import Budget
from spanbudget.collector.links import jaeger_trace_url, ui_trace_url
from spanbudget.collector.loadtest.client import RequestRecord
from spanbudget.collector.stats import percentile, percentiles

__all__ = [
    "GOOD_STATUSES",
    "RunInfo",
    "build_report",
    "request_row",
    "row_columns",
]

GOOD_STATUSES = ("ok", "warn")  # within every limit
SLOWEST = 5
OVER_TIME_WINDOW_S = 5.0


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


def row_columns(budget: Budget) -> list[str]:
    return [
        "index",
        "phase",
        "scheduled_s",
        "sent_s",
        "status_code",
        "error",
        "trace_id",
        "ttft_ms",
        "ttft_sched_ms",
        "itl_mean_ms",
        "itl_p95_ms",
        "total_ms",
        "total_sched_ms",
        "output_tokens",
        "verdict_status",
        "verdict_ttft_ms",
        *(f"{name}_ms" for name in budget.stage_names()),
        "blame",
    ]


def request_row(record: RequestRecord, verdict: Mapping[str, Any] | None) -> dict[str, Any]:
    """One CSV row: the client's view of a request and, if decided, its verdict."""
    row: dict[str, Any] = {
        "index": record.index,
        "phase": record.phase,
        "scheduled_s": round(record.scheduled_s, 6),
        "sent_s": round(record.sent_s, 6),
        "status_code": record.status_code,
        "error": record.error,
        "trace_id": record.trace_id,
        "ttft_ms": _r(record.ttft_ms),
        "ttft_sched_ms": _r(record.ttft_sched_ms),
        "itl_mean_ms": _r(record.itl_mean_ms),
        "itl_p95_ms": _r(record.itl_p95_ms),
        "total_ms": _r(record.total_ms),
        "total_sched_ms": _r(record.total_sched_ms),
        "output_tokens": record.output_tokens,
        "verdict_status": "",
        "verdict_ttft_ms": None,
        "blame": "",
    }
    if verdict is not None:
        row["verdict_status"] = verdict["status"]
        row["verdict_ttft_ms"] = verdict["ttft_ms"]
        row["blame"] = " ".join(verdict["blame"])
        for stage in verdict["stages"]:
            row[f"{stage['name']}_ms"] = stage["ms"]
    return row


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _values(rows: Sequence[Mapping[str, Any]], column: str) -> list[float]:
    return [float(row[column]) for row in rows if row.get(column) not in (None, "")]


def build_report(
    rows: Sequence[Mapping[str, Any]], budget: Budget, info: RunInfo
) -> dict[str, Any]:
    """Everything `report.json` holds, from the rows alone (plus the run's facts)."""
    total = len(rows)
    judged = [row for row in rows if row.get("verdict_status")]
    good = [row for row in judged if row["verdict_status"] in GOOD_STATUSES]
    errors = [row for row in rows if row.get("error") or int(row.get("status_code") or 0) != 200]
    by_status: dict[str, int] = {}
    for row in judged:
        by_status[row["verdict_status"]] = by_status.get(row["verdict_status"], 0) + 1
    within = len(good) / total if total else 0.0
    timed = _timed(judged)
    stages = []
    for stage in budget.stages:
        values = _values(timed, f"{stage.name}_ms")
        over = sum(1 for v in values if v > stage.limit_ms)
        stages.append(
            {
                "name": stage.name,
                "target_ms": stage.target_ms,
                "limit_ms": stage.limit_ms,
                "count": len(values),
                "share_over_limit": over / len(values) if values else 0.0,
                "ms": percentiles(values),
            }
        )
    slowest = sorted(
        (row for row in judged if row.get("verdict_ttft_ms") not in (None, "")),
        key=lambda row: float(row["verdict_ttft_ms"]),
        reverse=True,
    )[:SLOWEST]
    return {
        "run_id": info.run_id,
        "target": info.target,
        "model": info.model,
        "started_at": info.started_at,
        "duration_s": round(info.duration_s, 3),
        "config": dict(info.config),
        "budget": {
            "name": budget.name,
            "total": {"target_ms": budget.total_target_ms, "limit_ms": budget.total_limit_ms},
            "slo_objective": budget.slo_objective,
        },
        "requests": total,
        "errors": len(errors),
        "error_rate": len(errors) / total if total else 0.0,
        "verdicts": {"joined": len(judged), "missing": total - len(judged), "by_status": by_status},
        "slo": {
            "objective": budget.slo_objective,
            "within_limits": within,
            "met": total > 0 and within >= budget.slo_objective,
        },
        "goodput_rps": len(good) / info.duration_s if info.duration_s > 0 else 0.0,
        "ttft_ms": percentiles(_values(judged, "verdict_ttft_ms")),
        "client_ttft_ms": percentiles(_values(rows, "ttft_ms")),
        "client_ttft_sched_ms": percentiles(_values(rows, "ttft_sched_ms")),
        "itl_ms": percentiles(_values(rows, "itl_mean_ms")),
        "total_ms": percentiles(_values(rows, "total_ms")),
        "stages": stages,
        "phases": _phases(rows, budget),
        "stage_p95_over_time": _over_time(timed, budget),
        "slowest": [
            {
                "trace_id": row["trace_id"],
                "ttft_ms": float(row["verdict_ttft_ms"]),
                "status": row["verdict_status"],
                "blame": row["blame"].split(),
                "ui_url": ui_trace_url(info.ui_url, row["trace_id"]),
                "jaeger_url": jaeger_trace_url(info.jaeger_ui, row["trace_id"]),
            }
            for row in slowest
        ],
    }


def _timed(judged: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The verdicts every stage statistic of the report is taken over. Like the collector's
    /api/summary, they leave out `incomplete` ones: with no first token, their window is the
    whole request, not the time to first token."""
    return [row for row in judged if row["verdict_status"] != "incomplete"]


def _phases(rows: Sequence[Mapping[str, Any]], budget: Budget) -> list[dict[str, Any]]:
    names: list[str] = []
    for row in rows:
        if row["phase"] not in names:
            names.append(row["phase"])
    result = []
    for name in names:
        mine = [row for row in rows if row["phase"] == name]
        judged = [row for row in mine if row.get("verdict_status")]
        good = sum(1 for row in judged if row["verdict_status"] in GOOD_STATUSES)
        p95 = {}
        for stage in budget.stages:
            values = sorted(_values(_timed(judged), f"{stage.name}_ms"))
            p95[stage.name] = percentile(values, 95) if values else None
        result.append(
            {
                "name": name,
                "requests": len(mine),
                "within_limits": good / len(mine) if mine else 0.0,
                "stage_p95_ms": p95,
            }
        )
    return result


def _over_time(rows: Sequence[Mapping[str, Any]], budget: Budget) -> list[dict[str, Any]]:
    """Each stage's p95 over consecutive windows of scheduled time."""
    if not rows:
        return []
    last = max(float(row["scheduled_s"]) for row in rows)
    windows = []
    start = 0.0
    while start <= last:
        mine = [r for r in rows if start <= float(r["scheduled_s"]) < start + OVER_TIME_WINDOW_S]
        if mine:
            point: dict[str, Any] = {"t_s": start, "requests": len(mine)}
            for stage in budget.stages:
                values = sorted(_values(mine, f"{stage.name}_ms"))
                point[stage.name] = percentile(values, 95) if values else None
            windows.append(point)
        start += OVER_TIME_WINDOW_S
    return windows
