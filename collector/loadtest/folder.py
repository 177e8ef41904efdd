"""A finished run read back from its folder (`report.json`, `requests.csv`), as
`spanbudget report` renders it again, and its requests as the budget share reads them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import CollectorError
from ..stats import ShareRow
from .files import REPORT_JSON, REQUESTS_CSV, read_report, read_results
from .records import RequestResult
from .report_model import Report

__all__ = ["NotARunError", "RunFolder", "is_run_folder", "judged_requests", "read_run"]


class NotARunError(CollectorError, ValueError):
    """A folder without a readable report.json and requests.csv."""


@dataclass(frozen=True, slots=True)
class RunFolder:
    path: Path
    report: Report
    results: list[RequestResult]


def is_run_folder(path: Path) -> bool:
    """A folder holding a run's files (a load test's --out)."""
    return path.is_dir() and any((path / name).exists() for name in (REPORT_JSON, REQUESTS_CSV))


def read_run(path: Path) -> RunFolder:
    """The run's report and its requests; raises `NotARunError` saying what is missing."""
    try:
        return RunFolder(path, read_report(path / REPORT_JSON), read_results(path / REQUESTS_CSV))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        why = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) else str(exc)
        raise NotARunError(f"{path}: not a load-test run folder ({why})") from None


def judged_requests(results: Sequence[RequestResult]) -> list[ShareRow]:
    """Each request that got a verdict, at its send time (seconds from the run's start)."""
    return [
        ShareRow(
            at=r.request.sent_s,
            ttft_ms=r.verdict.ttft_ms,
            stage_ms={name: stage.ms for name, stage in r.verdict.stages.items()},
            status=r.verdict.status,
            blame=r.verdict.blame,
        )
        for r in results
        if r.verdict is not None
    ]
