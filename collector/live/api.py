"""The collector's HTTP interface (DESIGN §7): OTLP intake, verdict API, metrics, health, web UI.

`create_app` builds a FastAPI app over a running `Pipeline`; nothing here blocks on
evaluation, storage or forwarding.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hmac
import logging
import re
import threading
import time
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse

from spanbudget.collector.alerts.engine import RuleState
from spanbudget.collector.durations import parse_since
from spanbudget.collector.judging.verdict import Status
from spanbudget.collector.links import MAX_LIST
from spanbudget.collector.live.admission import Admission
from spanbudget.collector.live.intake import (
    JSON,
    PROTOBUF,
    QUEUE_FULL,
    Batch,
    IntakeError,
    encode_response,
    encode_status,
    is_json,
)
from spanbudget.collector.live.metrics import render
from spanbudget.collector.live.pipeline import Pipeline
from spanbudget.collector.live.trace_api import trace_router
from spanbudget.collector.live.ui import ui_router
from spanbudget.collector.live.ui.overview import overview_slices, window_share
from spanbudget.collector.live.verdict_columns import VerdictColumns
from spanbudget.collector.stats import MAX_SLICES
from spanbudget.serving import BodyAborted, BodyTimeout, BodyTooLarge, read_body

__all__ = ["create_app"]

log = logging.getLogger(__name__)

_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}\Z")
# google.rpc.Code values for the Status body of OTLP/HTTP errors.
_RPC_CODES = {400: 3, 401: 16, 408: 4, 413: 3, 415: 3, 503: 14}
# The web UI's pages load their one script and stylesheet from here; the charts are
# inline SVG (style attributes), nothing is framed, forms post back here only.
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
# Plain bodies up to this size decode in well under a millisecond: on the event loop, as
# handing them to a decoder thread would cost more. Larger or compressed ones go there.
_INLINE_BYTES = 64 * 1024


def create_app(pipeline: Pipeline) -> FastAPI:
    """The app for one pipeline (and its alert rules); the caller starts and closes it."""
    alerts = pipeline.alerts
    settings = pipeline.settings
    metrics = pipeline.metrics
    store = pipeline.store
    # The store as numpy columns, for /api/share and the web UI alike (one copy in memory),
    # read in now rather than when the first visitor asks (seconds at 100k verdicts).
    columns = VerdictColumns(store.path)
    threading.Thread(target=columns.warm, name="ui-columns", daemon=True).start()
    token = settings.receiver_token
    app = FastAPI(title="spanbudget collector", docs_url=None, redoc_url=None)
    app.add_middleware(SecurityHeaders)
    if settings.read_token is not None:
        app.add_middleware(ReadAuth, token=settings.read_token)

    def refuse(
        error: IntakeError, as_json: bool, headers: dict[str, str] | None = None
    ) -> Response:
        metrics.requests_rejected.labels(error.reason).inc()
        return Response(
            encode_status(_RPC_CODES.get(error.status, 2), error.message, as_json=as_json),
            status_code=error.status,
            media_type=JSON if as_json else PROTOBUF,
            headers=headers,
        )

    admission = Admission(pipeline.core.queued, settings.intake_queue_spans)
    busy = IntakeError(503, "queue_full", QUEUE_FULL)
    retry_after = {"Retry-After": str(settings.retry_after_seconds)}

    @app.post("/v1/traces")
    async def export_traces(request: Request) -> Response:
        content_type = request.headers.get("content-type")
        as_json = is_json(content_type)
        if token is not None and not _authorized(request.headers.get("authorization"), token):
            return refuse(
                IntakeError(401, "unauthorized", "missing or wrong bearer token"),
                as_json,
                {"WWW-Authenticate": "Bearer"},
            )
        encoding = request.headers.get("content-encoding")
        declared = request.headers.get("content-length", "")
        # Admission first: a refusal costs neither reading nor decoding the body.
        reserved = admission.admit(
            int(declared) if declared.isdigit() else None,
            compressed=encoding not in (None, "identity"),
        )
        if reserved is None:
            return refuse(busy, as_json, retry_after)
        body = b""
        batch = None
        try:
            body = await _read_body(request, settings.max_body_bytes, settings.body_timeout_seconds)
            receive = functools.partial(
                pipeline.receive, body, content_type=content_type, content_encoding=encoding
            )
            if len(body) <= _INLINE_BYTES and encoding in (None, "identity"):
                batch = receive()  # a small plain body: quicker decoded than handed over
            else:  # off the event loop: /healthz, the API and other uploads go on meanwhile
                batch = await asyncio.get_running_loop().run_in_executor(pipeline.decoders, receive)
        except IntakeError as exc:
            return refuse(exc, as_json, retry_after if exc.status == 503 else None)
        finally:
            plain = encoding in (None, "identity")
            spans = len(batch.spans) + batch.rejected if batch is not None and plain else 0
            admission.settle(reserved, len(body), spans)
        message = _rejection(batch, settings.max_span_bytes, settings.max_spans_per_trace)
        return Response(
            encode_response(batch.rejected, message, as_json=as_json),
            media_type=JSON if as_json else PROTOBUF,
        )

    @app.get("/api/verdicts/{trace_id}")
    def get_verdict(trace_id: str) -> dict[str, Any]:
        if not _TRACE_ID.match(trace_id):
            raise HTTPException(400, "trace_id must be 32 hex digits")
        verdict = store.get(trace_id.lower())
        if verdict is None:
            raise HTTPException(404, "no verdict (yet) for this trace")
        return verdict

    @app.get("/api/verdicts")
    def list_verdicts(
        status: Status | None = None,
        stage: str | None = None,
        run_id: str | None = None,
        since: str | None = None,
        before: str | None = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIST)] = 100,
    ) -> list[dict[str, Any]]:
        if before is not None and not _TRACE_ID.match(before):
            raise HTTPException(400, "before must be a trace id, 32 hex digits")
        return store.query(
            status=status,
            stage=stage,
            run_id=run_id,
            since=_since(since),
            before=before.lower() if before else None,
            limit=limit,
        )

    @app.get("/api/summary")
    def summary(since: str | None = None, run_id: str | None = None) -> dict[str, Any]:
        result = store.summary(since=_since(since), run_id=run_id)
        result["budget"] = pipeline.core.budget.name
        return result

    @app.get("/api/share")
    def share(
        since: str | None = None,
        until: str | None = None,
        run_id: str | None = None,
        slices: Annotated[int, Query(ge=0, le=10 * MAX_SLICES)] = MAX_SLICES,
    ) -> dict[str, Any]:
        """Each stage's share of the summed TTFT and of the overruns' blame over a window
        (and run), and per time slice: at most `slices` of them, 0 for none
        (docs/budget-share.md)."""
        start, end = _since(since), _since(until)
        selection = columns.select(since=start, until=end, run_id=run_id)
        budget = pipeline.core.budget
        cut = None
        if slices:
            cut = overview_slices(selection, start or 0.0, end or time.time(), max_slices=slices)
        result = window_share(selection, budget, cut).to_dict()
        result["budget"] = budget.name
        result["window"] = {"since": start, "until": end, "run_id": run_id}
        return result

    @app.get("/api/alerts")
    def list_alerts(state: RuleState | None = None) -> dict[str, Any]:
        """Every burn-rate rule on every stage: its state, both windows' burn, its traces."""
        if alerts is None:
            raise HTTPException(404, "this collector runs no alert rules")
        settings = alerts.settings
        rules = [status.to_dict() for status in alerts.rule_states()]
        return {
            "budget": alerts.budget.name,
            "window_scale": settings.window_scale,
            "min_traces": settings.min_judged,
            "min_overruns": settings.min_overruns,
            "rules": [r for r in rules if state is None or r["state"] == state.value],
        }

    @app.get("/metrics")
    def prometheus(request: Request) -> Response:
        body, content_type = render(metrics.registry, request.headers.get("accept"))
        return Response(body, media_type=content_type)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        ready = pipeline.core.ready()
        return JSONResponse(
            {"status": "ready" if ready else "not ready"}, status_code=200 if ready else 503
        )

    app.include_router(trace_router(pipeline.spans))  # GET /api/traces/{id}: OTLP/JSON
    app.include_router(ui_router(pipeline, columns=columns))  # the web UI: /, /traces, /runs
    return app


class ReadAuth:
    """ASGI middleware: the web UI and the API only for whoever has the token, sent as
    `Authorization: Bearer TOKEN` or as HTTP Basic's password (any user name: a browser
    asks for it). The intake checks its own token; probes, /metrics and the pages' static
    files stay open."""

    OPEN = ("/healthz", "/readyz", "/metrics", "/static/", "/v1/traces")

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if scope["type"] != "http" or path.startswith(self.OPEN) or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Basic realm="spanbudget", charset="UTF-8"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b'{"detail":"token required"}'})

    def _allowed(self, scope: Any) -> bool:
        header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        scheme, _, value = header.decode("latin-1").partition(" ")
        given = value.strip()
        if scheme.lower() == "basic":
            try:
                given = base64.b64decode(given, validate=True).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                return False
        elif scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())


class SecurityHeaders:
    """ASGI middleware: `nosniff` on every response, and on HTML pages a content security
    policy and a referrer policy. Plain ASGI (no body buffering), so the intake pays a
    header check per response and nothing more."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                names = {name.lower() for name, _ in headers}
                extra = [(b"x-content-type-options", b"nosniff")]
                html = any(n == b"content-type" and v.startswith(b"text/html") for n, v in headers)
                if html:
                    extra += [
                        (b"content-security-policy", _CSP.encode()),
                        (b"referrer-policy", b"same-origin"),
                    ]
                headers += [(n, v) for n, v in extra if n not in names]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _authorized(header: str | None, token: str) -> bool:
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip(), token)


async def _read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The raw body, refused as soon as it passes `limit` bytes (compressed or not) or
    when it is not all in after `timeout` seconds."""
    try:
        return await read_body(request, limit, timeout=timeout)
    except BodyTooLarge as exc:
        raise IntakeError(413, "too_large", str(exc)) from None
    except BodyTimeout as exc:
        raise IntakeError(408, "body_timeout", str(exc)) from None
    except BodyAborted as exc:
        log.info("upload from %s aborted: %s", _client(request), exc)
        raise IntakeError(400, "aborted", str(exc)) from None


def _rejection(batch: Batch, max_span_bytes: int, max_spans_per_trace: int) -> str:
    """The partial-success message: how many spans were refused, and why."""
    by_reason: dict[str, int] = {}
    for reasons in batch.lost.values():
        for reason, n in reasons.items():
            by_reason[reason] = by_reason.get(reason, 0) + n
    texts = {
        "span_too_large": f"over {max_span_bytes} bytes",
        "trace_span_limit": f"past {max_spans_per_trace} spans in one trace",
    }
    parts = [f"{n} span(s) {texts.get(reason, reason)}" for reason, n in sorted(by_reason.items())]
    return "rejected: " + "; ".join(parts) + " (their traces are judged as damaged)"


def _client(request: Request) -> str:
    client = request.client
    return f"{client.host}:{client.port}" if client else "unknown client"


def _since(text: str | None) -> float | None:
    """`15m` (that long ago) or an RFC 3339 time, as Unix seconds; `all` (as the web UI's
    ranges have it) or nothing: no bound."""
    if text is None or not text.strip() or text.strip() == "all":
        return None
    try:
        return parse_since(text)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
