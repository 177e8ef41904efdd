"""Reading one side of a comparison: a load-test run folder, trace files (judged as
`spanbudget check` judges them), or the collector's verdicts of a run or a time window.

This is the edge: files and HTTP. Each reader raises `SideError` with a message that says
what to change; the command turns it into exit 2.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from spanbudget.common.durations import parse_since

from ..budget.model import Budget
from ..check import evaluate_spans, read_inputs
from ..errors import CollectorError
from ..judging.verdict import Verdict
from ..links import MAX_LIST
from ..loadtest.files import REPORT_JSON, REQUESTS_CSV, read_report, read_results
from .samples import TTFT, Limits, Side

__all__ = [
    "SideError",
    "Window",
    "budget_limits",
    "collector_side",
    "page_verdicts",
    "parse_window",
    "path_side",
    "read_collector_verdicts",
    "window_params",
]

MAX_VERDICTS = 100_000  # read from the collector for one side at most


class SideError(CollectorError, ValueError):
    """A side that cannot be read."""


def budget_limits(budget: Budget) -> dict[str, Limits]:
    limits = {s.name: Limits(s.target_ms, s.limit_ms) for s in budget.stages}
    limits[TTFT] = Limits(budget.total_target_ms, budget.total_limit_ms)
    return limits


def path_side(
    label: str, path: Path, load_budget: Callable[[], Budget], *, phase: str | None = None
) -> Side:
    """A run folder (it holds `requests.csv`) or trace files: a folder of them, or a file.
    `load_budget` is called only for trace files, which need a budget to be judged."""
    if path.is_dir() and (path / REQUESTS_CSV).is_file():
        try:
            results = read_results(path / REQUESTS_CSV)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SideError(f"{path}: not a load-test run folder ({exc})") from None
        side = Side.of_results(label, str(path), results, phase=phase)
        if (path / REPORT_JSON).is_file():
            try:
                report = read_report(path / REPORT_JSON)
            except (OSError, ValueError, KeyError, TypeError):
                return side  # the limits only colour the charts
            limits = {s.name: Limits(s.target_ms, s.limit_ms) for s in report.stages}
            limits[TTFT] = Limits(report.total_target_ms, report.total_limit_ms)
            side = side.with_limits(limits)
        return side
    if not path.exists():
        raise SideError(f"{path}: no such file or folder")
    inputs = read_inputs([path], sys.stdin.buffer)
    if inputs.problems:
        raise SideError("; ".join(inputs.problems))
    budget = load_budget()
    result = evaluate_spans(inputs.spans, budget)
    if not result.verdicts:
        raise SideError(
            f"{path}: no trace judged (neither a run folder with {REQUESTS_CSV} nor trace "
            f"files whose spans match budget {budget.name!r})"
        )
    side = Side.of_verdicts(label, "traces", str(path), result.verdicts, phase=phase)
    return side.with_limits(budget_limits(budget))


@dataclass(frozen=True, slots=True)
class Window:
    """`since..until` (each `2h`, i.e. that long ago, or an RFC 3339 time; `until` may be
    left out), as Unix seconds."""

    since: float
    until: float | None
    text: str

    def holds(self, verdict: Verdict) -> bool:
        return self.until is None or verdict.evaluated_at.timestamp() < self.until


def parse_window(text: str) -> Window | None:
    """The window `text` names, or None when it names none (it is then a run id)."""
    since, sep, until = text.partition("..")
    try:
        start = parse_since(since.strip())
        end = parse_since(until.strip()) if sep and until.strip() else None
    except ValueError:
        if sep:
            raise SideError(
                f"{text!r}: a window is SINCE..UNTIL, each a duration ago (2h) or an RFC 3339 time"
            ) from None
        return None
    return Window(start, end, text)


def page_verdicts(
    fetch: Callable[[str | None], list[dict[str, Any]]],
    keep: Callable[[Verdict], bool],
    *,
    page: int = MAX_LIST,
    at_most: int = MAX_VERDICTS,
) -> list[Verdict]:
    """Every verdict a newest-first listing serves, oldest first: `fetch(before)` is one
    page of at most `page` served verdicts after trace id `before` (None: the newest), as
    `GET /api/verdicts` and the store's `query` page. `keep` drops verdicts (a window's
    end); at most `at_most` are read."""
    found: list[Verdict] = []
    before: str | None = None
    while len(found) < at_most:
        listed = fetch(before)
        for served in listed:
            try:
                verdict = Verdict.from_dict(served)
            except (KeyError, TypeError, ValueError) as exc:
                raise SideError(f"served something not a verdict: {exc!r}") from None
            if keep(verdict):
                found.append(verdict)
        if len(listed) < page or before == listed[-1]["trace_id"]:
            break
        before = listed[-1]["trace_id"]
    found.reverse()
    return found


def read_collector_verdicts(
    http: httpx.Client, url: str, params: dict[str, str], keep: Callable[[Verdict], bool]
) -> list[Verdict]:
    """Every verdict `GET /api/verdicts` serves for `params`, oldest first."""
    endpoint = url.rstrip("/") + "/api/verdicts"

    def fetch(before: str | None) -> list[dict[str, Any]]:
        query = {**params, "limit": str(MAX_LIST), **({"before": before} if before else {})}
        try:
            response = http.get(endpoint, params=query)
            response.raise_for_status()
            listed: list[dict[str, Any]] = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise SideError(f"cannot read verdicts from {endpoint}: {exc}") from None
        return listed

    return page_verdicts(fetch, keep)


def window_params(window: Window) -> dict[str, str]:
    """The `since` the verdict API reads; the window's end is `Window.holds`'s to keep."""
    return {"since": datetime.fromtimestamp(window.since).astimezone().isoformat()}


def collector_side(
    label: str,
    spec: str,
    url: str,
    *,
    phase: str | None = None,
    http: httpx.Client | None = None,
) -> Side:
    """The verdicts of run `spec`, or of the window `spec` names (`parse_window`)."""
    window = parse_window(spec)
    own = http is None
    client = http or httpx.Client(timeout=30.0)
    try:
        if window is None:
            verdicts = read_collector_verdicts(client, url, {"run_id": spec}, lambda v: True)
            kind, what = "collector run", f"run {spec}"
        else:
            verdicts = read_collector_verdicts(client, url, window_params(window), window.holds)
            kind, what = "collector window", f"window {spec}"
    finally:
        if own:
            client.close()
    if not verdicts:
        raise SideError(f"{url}: no verdicts for {what}")
    return Side.of_verdicts(label, kind, f"{url} {what}", verdicts, phase=phase)
