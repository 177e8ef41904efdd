"""A run's files, written from its records and read back into them: `requests.csv` (one row
per request, its verdict's statuses and every stage's ms) and `report.json`."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..judging.verdict import Status
from .client import RequestRecord
from .records import RequestResult, RequestVerdict, StageTime
from .report_model import Report

__all__ = [
    "REPORT_JSON",
    "REQUESTS_CSV",
    "read_report",
    "read_results",
    "write_report",
    "write_results",
]

REQUESTS_CSV = "requests.csv"
REPORT_JSON = "report.json"


def _float(text: str) -> float | None:
    return None if text == "" else float(text)


def _int(text: str) -> int | None:
    return None if text == "" else int(text)


# The client's columns (`RequestRecord` fields, each with how its cell reads back), then
# the verdict's; then each stage's ms, each stage's status, and the blame.
_REQUEST: dict[str, Callable[[str], Any]] = {
    "index": int,
    "phase": str,
    "scheduled_s": float,
    "sent_s": float,
    "status_code": int,
    "error": str,
    "trace_id": str,
    "ttft_ms": _float,
    "ttft_sched_ms": _float,
    "itl_mean_ms": _float,
    "itl_p95_ms": _float,
    "total_ms": float,
    "total_sched_ms": float,
    "output_tokens": int,
    "prompt_tokens": _int,
    "model": str,
    "sent_at": str,
}
# Files written before these columns existed still read back (they stay empty).
_ADDED = ("prompt_tokens", "model", "sent_at", "verdict_context")
# `verdict_context`: why the blamed stage may have overrun (`context.why`), when known.
_VERDICT = ("verdict_status", "verdict_ttft_ms", "verdict_total_status", "verdict_context")
_FIXED = (*_REQUEST, *_VERDICT)
_FIXED_BEFORE = tuple(name for name in _FIXED if name not in _ADDED)


def columns(stage_names: Sequence[str]) -> list[str]:
    return [
        *_FIXED,
        *(f"{name}_ms" for name in stage_names),
        *(f"{name}_status" for name in stage_names),
        "blame",
    ]


def write_results(path: Path, stage_names: Sequence[str], results: Sequence[RequestResult]) -> None:
    """One row per request; a request without a verdict leaves the verdict's cells empty."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns(stage_names))
        for result in results:
            writer.writerow(_row(result, stage_names))


def read_results(path: Path) -> list[RequestResult]:
    """The records `write_results` wrote; raises ValueError on a file it did not write."""
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty, not a {REQUESTS_CSV}")
        fixed, stage_names = _layout(header)
        results = []
        for number, row in enumerate(reader, 2):
            if len(row) != len(header):
                raise ValueError(f"{path}:{number}: {len(row)} cells, the header has {len(header)}")
            results.append(_result(row, fixed, stage_names))
    return results


def write_report(path: Path, report: Report) -> None:
    path.write_text(json.dumps(report.to_dict(), indent=2) + "\n")


def read_report(path: Path) -> Report:
    """The report `write_report` wrote; raises ValueError, KeyError or TypeError otherwise."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise TypeError(f"{path}: a JSON object expected")
    return Report.from_dict(data)


def _row(result: RequestResult, stage_names: Sequence[str]) -> list[object]:
    cells: list[object] = [getattr(result.request, name) for name in _REQUEST]
    v = result.verdict
    if v is None:
        cells += [None] * (len(_VERDICT) + 2 * len(stage_names) + 1)
    else:
        stages = [v.stages.get(name) for name in stage_names]
        cells += [v.status.value, v.ttft_ms, v.total_status.value, v.context]
        cells += [None if s is None else s.ms for s in stages]
        cells += [None if s is None else s.status.value for s in stages]
        cells.append(" ".join(v.blame))
    return ["" if cell is None else cell for cell in cells]


def _layout(header: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """The fixed columns this file has (today's, or those before `_ADDED`) and its stages."""
    fixed = _FIXED if tuple(header[: len(_FIXED)]) == _FIXED else _FIXED_BEFORE
    stage_columns = header[len(fixed) : -1]
    half = len(stage_columns) // 2
    names = [c.removesuffix("_ms") for c in stage_columns[:half]]
    expected = [*fixed, *columns(names)[len(_FIXED) :]]
    if header[-1:] != ["blame"] or len(stage_columns) % 2 or header != expected:
        raise ValueError(f"not the columns of a {REQUESTS_CSV}: {header[:3]}...")
    return fixed, names


def _result(row: list[str], fixed: tuple[str, ...], stage_names: list[str]) -> RequestResult:
    cell = dict(zip(fixed, row, strict=False))
    request = RequestRecord(
        **{name: read(cell[name]) for name, read in _REQUEST.items() if name in cell}
    )
    if not cell["verdict_status"]:
        return RequestResult(request)
    n = len(fixed)
    times = row[n : n + len(stage_names)]
    statuses = row[n + len(stage_names) : n + 2 * len(stage_names)]
    stages = {
        name: StageTime(_float(ms), Status(status))
        for name, ms, status in zip(stage_names, times, statuses, strict=True)
        if status  # a stage the verdict did not have (another budget's)
    }
    verdict = RequestVerdict(
        status=Status(cell["verdict_status"]),
        ttft_ms=_float(cell["verdict_ttft_ms"]),
        total_status=Status(cell["verdict_total_status"]),
        context=cell.get("verdict_context", ""),
        stages=stages,
        blame=tuple(row[-1].split()),
    )
    return RequestResult(request, verdict)
