"""Recent traces of one service from a running Jaeger v2, through its query API over HTTP:
API v3 (`/api/v3/traces`, OTLP JSON) by default, or the API its UI uses (`/api/traces`,
Jaeger UI JSON) when the URL names that path."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx

from ..spans import Span
from ._errors import TraceReadError
from ._formats import parse_traces

__all__ = ["DEFAULT_LIMIT", "read_jaeger_api"]

FIND_TRACES_PATH = "/api/v3/traces"
LEGACY_SEARCH_PATH = "/api/traces"
DEFAULT_LIMIT = 100
DEFAULT_TIMEOUT_SECONDS = 30.0
_ERROR_BODY_CHARS = 300


def read_jaeger_api(
    base_url: str,
    service: str,
    since_seconds: float,
    *,
    client: httpx.Client | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[Span]:
    """Every span of up to `limit` traces of `service` that started in the last `since_seconds`.

    `base_url` is Jaeger's query address, e.g. `http://127.0.0.1:16686` (API v3), or that
    address with `/api/traces` (the UI's API). Either way the traces come raw, as stored. No
    trace found is an empty list; HTTP and connection errors raise `TraceReadError` naming
    the URL.
    """
    if since_seconds <= 0 or limit <= 0:
        raise ValueError(f"since_seconds and limit must be positive: {since_seconds}, {limit}")
    now = datetime.now(UTC)
    start = now - timedelta(seconds=since_seconds)
    if base_url.rstrip("/").endswith(LEGACY_SEARCH_PATH):
        url = base_url.rstrip("/")
        params = _legacy_search_params(service, start, now, limit)
    else:
        url = _find_traces_url(base_url)
        params = _find_traces_params(service, start, now, limit)
    try:
        if client is None:
            with httpx.Client(timeout=DEFAULT_TIMEOUT_SECONDS) as own_client:
                response = own_client.get(url, params=params)
        else:
            response = client.get(url, params=params)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise TraceReadError(url, f"cannot query Jaeger: {exc!r}") from None
    if response.status_code == httpx.codes.NOT_FOUND and _is_gateway_error(response):
        return []  # Jaeger answers 404 "No traces found" to a search that found nothing
    if response.status_code != httpx.codes.OK:
        raise TraceReadError(
            url, f"Jaeger answered HTTP {response.status_code}: {_error_message(response)}"
        )
    return parse_traces(response.content, url)


def _find_traces_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if base.endswith(FIND_TRACES_PATH):
        return base
    return base.removesuffix("/api/v3") + FIND_TRACES_PATH


def _find_traces_params(
    service: str, start_min: datetime, start_max: datetime, limit: int
) -> httpx.QueryParams:
    """Query parameters under both spellings Jaeger v2 has used.

    Jaeger ≥ 2.1x reads camelCase names and prefers them over the snake_case ones, which
    earlier v2 releases read and later ones drop; sending both works with either. The
    number of traces had a third name, `query.num_traces`, up to at least v2.12, which
    answers 500 to a search without it.
    Raw traces: the evaluator makes its own clock-skew adjustment, as the live collector
    does, so Jaeger's adjusters must not have run first.
    """
    values = {
        ("query.serviceName", "query.service_name"): service,
        ("query.startTimeMin", "query.start_time_min"): _rfc3339(start_min),
        ("query.startTimeMax", "query.start_time_max"): _rfc3339(start_max),
        ("query.searchDepth", "query.search_depth", "query.num_traces"): str(limit),
        ("query.rawTraces", "query.raw_traces"): "true",
    }
    return httpx.QueryParams([(name, value) for names, value in values.items() for name in names])


def _legacy_search_params(
    service: str, start: datetime, end: datetime, limit: int
) -> httpx.QueryParams:
    """The UI API's search: times in microseconds since the epoch, raw traces as for v3."""
    return httpx.QueryParams(
        {
            "service": service,
            "start": str(int(start.timestamp() * 1e6)),
            "end": str(int(end.timestamp() * 1e6)),
            "limit": str(limit),
            "raw": "true",
        }
    )


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _is_gateway_error(response: httpx.Response) -> bool:
    """A 404 from the API v3 gateway itself (JSON error body), not from a wrong URL."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("error"), dict)


def _error_message(response: httpx.Response) -> str:
    try:
        body = json.loads(response.content)
        message = body["error"]["message"]
        if isinstance(message, str):
            return message
    except (ValueError, KeyError, TypeError):
        pass
    text = response.text.strip()
    return text[:_ERROR_BODY_CHARS] or response.reason_phrase
