"""The collector's HTTP interface (DESIGN §7): OTLP intake, verdict API, metrics, health, web UI.

`create_app` builds a FastAPI app from the parts it serves (the intake, the verdict
store, the current budget, the alert rules, the kept spans), each passed as what it is;
`app_for` hands it those of an assembled `Pipeline`. Nothing here blocks on evaluation,
storage or forwarding.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from spanbudget.common.durations import parse_since

from ..alerts.budgets import BudgetAlerts
from ..alerts.engine import RuleState
from ..budget.loader import BudgetNames
from ..budget.model import Budget
from ..core.metrics import render
from ..intake.grpc_server import GrpcIntake
from ..intake.http import OtlpHttp
from ..intake.receiver import Intake
from ..judging.verdict import Status
from ..links import MAX_LIST
from ..sinks.store import VerdictStore
from ..stats import MAX_SLICES
from ..ui import SpanSource, ui_router
from ..ui.columns import VerdictColumns
from ..ui.overview import overview_slices, window_share
from .pipeline import Pipeline
from .trace_api import trace_router

__all__ = ["app_for", "create_app"]

log = logging.getLogger(__name__)


_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}\Z")
# The web UI's pages load their one script and stylesheet from here; the charts are
# inline SVG (style attributes), nothing is framed, forms post back here only.
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


def create_app(
    *,
    intake: Intake,
    store: VerdictStore,
    budget: Callable[[], Budget],
    ready: Callable[[], bool],
    registry: CollectorRegistry,
    alerts: BudgetAlerts | None = None,
    spans: SpanSource | None = None,
    jaeger_ui: str | None = None,
    read_token: str | None = None,
    grpc: GrpcIntake | None = None,
) -> FastAPI:
    """The collector's app: `intake` on POST /v1/traces; the verdicts in `store` on /api
    and the web UI, judged against `budget()` (the current one), with `alerts`' rules and
    the kept `spans`; `registry` on /metrics; `ready()` on /readyz. With `read_token`, the
    web UI and /api ask for it. `grpc`, OTLP/gRPC beside the rest, serves while the app
    does (its lifespan starts and stops it). The caller starts and closes what it passes."""
    # The store as numpy columns, for /api/share and the web UI alike (one copy in memory),
    # read in now rather than when the first visitor asks (seconds at 100k verdicts).
    columns = VerdictColumns(store.path)
    named = BudgetNames(budget)  # a budget by the name its verdicts give it
    threading.Thread(target=columns.warm, name="ui-columns", daemon=True).start()
    spans = spans or SpanSource(None, None)
    app = FastAPI(
        title="spanbudget collector", docs_url=None, redoc_url=None, lifespan=_serving(grpc)
    )
    # The last added runs first: the token check, the headers every answer carries, then
    # POST /v1/traces, answered there ahead of the routing and the rest.
    app.add_middleware(OtlpHttp, intake=intake)
    app.add_middleware(SecurityHeaders)
    if read_token is not None:
        app.add_middleware(ReadAuth, token=read_token)

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
    def summary(
        since: str | None = None,
        run_id: str | None = None,
        budget_name: Annotated[str | None, Query(alias="budget")] = None,
    ) -> dict[str, Any]:
        """`budget`: only the verdicts that budget judged (the budget in effect, or a
        recognised library's preset); every verdict otherwise."""
        result = store.summary(since=_since(since), run_id=run_id, budget=budget_name)
        result["budget"] = budget_name or budget().name
        return result

    @app.get("/api/share")
    def share(
        since: str | None = None,
        until: str | None = None,
        run_id: str | None = None,
        slices: Annotated[int, Query(ge=0, le=10 * MAX_SLICES)] = MAX_SLICES,
        budget_name: Annotated[str | None, Query(alias="budget")] = None,
    ) -> dict[str, Any]:
        """Each stage's share of the summed TTFT and of the overruns' blame over a window
        (and run), and per time slice: at most `slices` of them, 0 for none
        (docs/budget-share.md). With `budget`, of the verdicts that budget judged, by its
        stages; without, of every verdict, by the budget in effect's stages."""
        start, end = _since(since), _since(until)
        selection = columns.select(since=start, until=end, run_id=run_id, budget=budget_name)
        current = (named(budget_name) if budget_name else None) or budget()
        cut = None
        if slices:
            cut = overview_slices(selection, start or 0.0, end or time.time(), max_slices=slices)
        result = window_share(selection, current, cut).to_dict()
        result["budget"] = budget_name or current.name
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
            "budgets": [engine.budget.name for engine in alerts.engines()],
            "window_scale": settings.window_scale,
            "min_traces": settings.min_judged,
            "min_overruns": settings.min_overruns,
            "rules": [r for r in rules if state is None or r["state"] == state.value],
        }

    @app.get("/metrics")
    def prometheus(request: Request) -> Response:
        body, content_type = render(registry, request.headers.get("accept"))
        return Response(body, media_type=content_type)

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        """Both listeners: this one answers; OTLP/gRPC serves, is off, or failed."""
        listeners = {"http": "serving"}
        answer: dict[str, Any] = {"listeners": listeners}
        failed = False
        if grpc is not None:
            listeners["grpc"] = "serving" if grpc.serving else "not serving"
            failed = not grpc.serving and grpc.required
            if grpc.serving:
                answer["grpc_address"] = grpc.address
        else:
            listeners["grpc"] = "off"
        answer["status"] = "failing" if failed else "ok"
        return JSONResponse(answer, status_code=503 if failed else 200)

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        is_ready = ready()
        return JSONResponse(
            {"status": "ready" if is_ready else "not ready"}, status_code=200 if is_ready else 503
        )

    app.include_router(trace_router(spans.store))  # GET /api/traces/{id}: OTLP/JSON
    # The web UI: /, /traces, /runs
    app.include_router(
        ui_router(
            budget=budget, store=store, columns=columns, spans=spans, alerts=alerts,
            jaeger_ui=jaeger_ui, budget_named=named,
        )
    )  # fmt: skip
    return app


def app_for(pipeline: Pipeline) -> FastAPI:
    """The app over an assembled pipeline: each part gets the pieces it serves."""
    settings = pipeline.settings
    return create_app(
        intake=pipeline.intake,
        store=pipeline.store,
        budget=lambda: pipeline.core.budget,
        ready=pipeline.core.ready,
        registry=pipeline.metrics.registry,
        alerts=pipeline.alerts,
        spans=SpanSource(pipeline.spans, settings.jaeger_url),
        jaeger_ui=settings.jaeger_ui,
        read_token=settings.read_token,
        grpc=pipeline.grpc,
    )


def _serving(
    grpc: GrpcIntake | None,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: OTLP/gRPC serves on the app's event loop while the app does."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if grpc is not None:
            try:
                await grpc.start()
                log.info("OTLP/gRPC listening on %s", grpc.address)
            except RuntimeError as exc:
                if grpc.required:
                    raise
                log.warning("%s; OTLP/HTTP goes on alone (--grpc-listen off: quiet)", exc)
        try:
            yield
        finally:
            if grpc is not None:
                await grpc.stop()

    return lifespan


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


def _since(text: str | None) -> float | None:
    """`15m` (that long ago) or an RFC 3339 time, as Unix seconds; `all` (as the web UI's
    ranges have it) or nothing: no bound."""
    if text is None or not text.strip() or text.strip() == "all":
        return None
    try:
        return parse_since(text)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
