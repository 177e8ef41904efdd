"""Fetch a run's verdicts from the budget collector's API, waiting (bounded) for stragglers."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

import httpx

__all__ = ["PAGE", "CollectorUnavailable", "wait_for_verdicts"]

PAGE = 1000  # the most verdicts `GET /api/verdicts` serves at once (its `limit` bound)


class CollectorUnavailable(RuntimeError):
    """The collector could not be asked at all."""


def _verdict_list(payload: Any) -> list[dict[str, Any]]:
    if isinstance(payload, list):
        return payload
    if isinstance(payload, dict):
        for key in ("verdicts", "items", "data"):
            if isinstance(payload.get(key), list):
                return list(payload[key])
    raise CollectorUnavailable(f"unexpected answer from the verdict API: {str(payload)[:200]}")


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
) -> dict[str, dict[str, Any]]:
    """Verdicts of `trace_ids` by trace id; returns what has arrived when time is up.

    The collector decides a trace a decision-wait after its last span, so verdicts trail
    the last response by a couple of seconds.
    """
    wanted = set(trace_ids)
    found: dict[str, dict[str, Any]] = {}
    url = collector_url.rstrip("/") + "/api/verdicts"
    params = {"run_id": run_id, "limit": str(PAGE)}
    deadline = clock() + timeout_s
    own = client is None
    http = client or httpx.Client(timeout=10.0)
    try:
        while True:
            try:
                response = http.get(url, params=params)
                response.raise_for_status()
            except httpx.HTTPError as exc:
                raise CollectorUnavailable(f"cannot read verdicts from {url}: {exc}") from None
            listed = _verdict_list(response.json())
            for verdict in listed:
                if verdict.get("trace_id") in wanted:
                    found[verdict["trace_id"]] = verdict
            if len(listed) >= PAGE:
                # The newest page is full: older verdicts of the run lie beyond it, and the
                # API has no cursor, so ask for the missing ones one by one.
                _fetch_each(http, url, wanted - found.keys(), found, until=deadline, clock=clock)
            if wanted <= found.keys() or clock() >= deadline:
                return found
            sleep(poll_s)
    finally:
        if own:
            http.close()


def _fetch_each(
    http: httpx.Client,
    url: str,
    trace_ids: Collection[str],
    found: dict[str, dict[str, Any]],
    *,
    until: float,
    clock: Callable[[], float],
) -> None:
    for trace_id in trace_ids:
        if clock() >= until:
            return
        try:
            response = http.get(f"{url}/{trace_id}")
        except httpx.HTTPError as exc:
            raise CollectorUnavailable(f"cannot read verdicts from {url}: {exc}") from None
        if response.status_code == 200:
            found[trace_id] = response.json()
        elif response.status_code != 404:  # 404: not decided yet
            raise CollectorUnavailable(f"{url}/{trace_id} answered {response.status_code}")
