"""Fetch a run's verdicts from the budget collector's API, waiting (bounded) for stragglers.

The API serves verdicts as DESIGN §6 JSON; they come back as `Verdict`s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

import httpx

from ..errors import CollectorError
from ..judging.verdict import Verdict
from ..links import MAX_LIST

__all__ = ["CollectorUnavailable", "wait_for_verdicts"]


class CollectorUnavailable(CollectorError, RuntimeError):
    """The collector could not be asked at all."""


def _verdict_list(payload: Any) -> list[dict[str, Any]]:
    if isinstance(payload, list):
        return payload
    if isinstance(payload, dict):
        for key in ("verdicts", "items", "data"):
            if isinstance(payload.get(key), list):
                return list(payload[key])
    raise CollectorUnavailable(f"unexpected answer from the verdict API: {str(payload)[:200]}")


def _verdict(served: dict[str, Any]) -> Verdict:
    try:
        return Verdict.from_dict(served)
    except (KeyError, TypeError, ValueError) as exc:
        raise CollectorUnavailable(
            f"the verdict API answered something that is not a verdict ({exc!r}): "
            f"{str(served)[:200]}"
        ) from None


def wait_for_verdicts(
    collector_url: str,
    run_id: str,
    trace_ids: Collection[str],
    *,
    timeout_s: float = 30.0,
    poll_s: float = 0.5,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    token: str | None = None,
) -> dict[str, Verdict]:
    """Verdicts of `trace_ids` by trace id; returns what has arrived when time is up.
    `token`: the collector's API token, when it asks for one.

    The collector decides a trace a decision-wait after its last span, so verdicts trail
    the last response by a couple of seconds.
    """
    wanted = set(trace_ids)
    found: dict[str, Verdict] = {}
    url = collector_url.rstrip("/") + "/api/verdicts"
    deadline = clock() + timeout_s
    own = client is None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = client or httpx.Client(timeout=10.0, headers=headers)
    try:
        while True:
            _read_run(http, url, run_id, wanted, found)
            if wanted <= found.keys() or clock() >= deadline:
                return found
            sleep(poll_s)
    finally:
        if own:
            http.close()


def _read_run(
    http: httpx.Client,
    url: str,
    run_id: str,
    wanted: set[str],
    found: dict[str, Verdict],
) -> None:
    """Page through the run's verdicts, newest first, until a short page or all are found."""
    params = {"run_id": run_id, "limit": str(MAX_LIST)}
    while True:
        try:
            response = http.get(url, params=params)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise CollectorUnavailable(f"cannot read verdicts from {url}: {exc}") from None
        listed = _verdict_list(response.json())
        for served in listed:
            if isinstance(served, dict) and served.get("trace_id") in wanted:
                found[served["trace_id"]] = _verdict(served)
        if len(listed) < MAX_LIST or wanted <= found.keys():
            return
        if params.get("before") == listed[-1]["trace_id"]:
            return  # a collector that ignores the cursor: this is all it will give
        params["before"] = listed[-1]["trace_id"]
