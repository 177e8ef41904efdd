"""Where `whatif` reads traces: files (as `check` reads them), a load-test run's traces
from the collector that judged them, or a collector's time window. The I/O edge: the
collector is asked over HTTP (`GET /api/verdicts`, `GET /api/traces/{trace_id}`) through
an injected `httpx.Client`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from ..check import read_inputs
from ..errors import CollectorError
from ..links import MAX_LIST
from ..loadtest.files import REQUESTS_CSV, read_results
from ..readers import TraceReadError, request_from_json, spans_from_otlp
from ..spans import Span, group_by_trace

__all__ = ["Source", "SourceError", "from_collector_window", "from_files", "from_run"]


class SourceError(CollectorError):
    """Traces could not be read: the message says from where and what to change."""


class Source:
    """The traces read (each a list of spans) and what could not be read."""

    def __init__(self, traces: Sequence[list[Span]], problems: Sequence[str], what: str) -> None:
        self.traces = list(traces)
        self.problems = list(problems)
        self.what = what  # for people: where the traces came from


def from_files(paths: Iterable[Path], stdin: BinaryIO) -> Source:
    paths = list(paths)
    inputs = read_inputs(paths, stdin)
    traces = list(group_by_trace(inputs.spans).values())
    return Source(traces, inputs.problems, f"{len(paths)} input(s)")


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def fetch_trace(client: httpx.Client, base: str, trace_id: str, token: str | None) -> list[Span]:
    """One trace's spans from the collector; SourceError when it cannot answer, an empty
    list when it keeps no spans of that trace."""
    url = f"{base.rstrip('/')}/api/traces/{trace_id}"
    try:
        response = client.get(url, headers=_headers(token))
    except httpx.HTTPError as exc:
        raise SourceError(f"cannot reach the collector at {base}: {exc}") from None
    if response.status_code == 404:
        return []
    if response.status_code != 200:
        raise SourceError(f"{url}: HTTP {response.status_code} {response.text[:200]}")
    try:
        return spans_from_otlp(request_from_json(response.json(), url), source=url)
    except (TraceReadError, json.JSONDecodeError) as exc:
        raise SourceError(f"{url}: {exc}") from None


def _fetch_all(
    client: httpx.Client, base: str, trace_ids: Sequence[str], token: str | None
) -> tuple[list[list[Span]], list[str]]:
    traces: list[list[Span]] = []
    missing: list[str] = []
    for trace_id in trace_ids:
        spans = fetch_trace(client, base, trace_id, token)
        if spans:
            traces.append(spans)
        else:
            missing.append(trace_id)
    problems = []
    if missing:
        problems.append(
            f"the collector keeps no spans of {len(missing)} of {len(trace_ids)} traces "
            f"(e.g. {missing[0]}): not judged yet, pruned, or another collector's"
        )
    return traces, problems


def from_run(
    run_dir: Path,
    collector: str,
    client: httpx.Client,
    *,
    phase: str | None = None,
    token: str | None = None,
) -> Source:
    """A load-test run's traces (its `requests.csv` gives their ids and phases), their
    spans from the collector that judged them."""
    path = run_dir / REQUESTS_CSV
    try:
        results = read_results(path)
    except (OSError, ValueError) as exc:
        raise SourceError(f"{run_dir}: not a load-test run ({exc})") from None
    phases = list(dict.fromkeys(r.request.phase for r in results))
    if phase is not None and phase not in phases:
        raise SourceError(f"--phase {phase!r}: the run's phases are {', '.join(phases)}")
    ids = [
        r.request.trace_id
        for r in results
        if r.request.trace_id and (phase is None or r.request.phase == phase)
    ]
    traces, problems = _fetch_all(client, collector, ids, token)
    where = f"run {run_dir}" + (f", phase {phase}" if phase else "")
    return Source(traces, problems, f"{where} ({len(ids)} requests)")


def _verdict_ids(client: httpx.Client, base: str, since: str, token: str | None) -> list[str]:
    """Every trace the collector judged since `since`, newest first, page by page."""
    ids: list[str] = []
    before: str | None = None
    while True:
        params: dict[str, Any] = {"since": since, "limit": MAX_LIST}
        if before:
            params["before"] = before
        try:
            response = client.get(
                f"{base.rstrip('/')}/api/verdicts", params=params, headers=_headers(token)
            )
        except httpx.HTTPError as exc:
            raise SourceError(f"cannot reach the collector at {base}: {exc}") from None
        if response.status_code != 200:
            raise SourceError(
                f"{base}/api/verdicts: HTTP {response.status_code} {response.text[:200]}"
            )
        page = [v["trace_id"] for v in response.json()]
        ids += page
        if len(page) < MAX_LIST:
            return ids
        before = page[-1]


def from_collector_window(
    collector: str, since: str, client: httpx.Client, *, token: str | None = None
) -> Source:
    """Every trace the collector judged in the window (`15m`, or an RFC 3339 time)."""
    ids = _verdict_ids(client, collector, since, token)
    traces, problems = _fetch_all(client, collector, ids, token)
    return Source(traces, problems, f"collector {collector}, since {since} ({len(ids)} verdicts)")
