"""The web UI's pages: overview, trace list, trace, load-test runs (Jinja2, inline SVG).

Every page is rendered on the server from aggregates; the only script refreshes the
overview's body in place and keeps `/#<trace id>` links working.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime
from importlib import resources
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, select_autoescape
from spanbudget.common.durations import parse_since

from ..alerts.budgets import BudgetAlerts
from ..annotations import LOADTEST_RUN_ID
from ..budget.loader import BudgetNames
from ..budget.model import Budget
from ..charts import (
    BandRow,
    BudgetRow,
    StackPart,
    band_class,
    budget_bars,
    fmt_ms,
    stage_bands,
    stage_stack,
)
from ..compare import CompareSettings, Side, compare, render_body
from ..compare.sources import SideError, page_verdicts, parse_window
from ..context import why
from ..judging.auto import Judges
from ..judging.verdict import Status
from ..links import MAX_LIST, jaeger_trace_url
from ..loadtest.report_model import Report
from ..sinks.store import VerdictStore
from ..stats import judge_slo
from .columns import VerdictColumns
from .overview import build_overview
from .run_report import run_report, run_verdicts
from .trace_spans import SpanSource, TraceSpans
from .waterfall import build_waterfall, render_waterfall, window_of

__all__ = ["RANGES", "ui_router"]

log = logging.getLogger(__name__)
_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}\Z")
RANGES = ("15m", "1h", "6h", "24h", "7d", "all")
DEFAULT_RANGE = "1h"
PAGE_SIZE = 50
REFRESH_SECONDS = 5
COMPARE_RESAMPLES = 1000  # per stage and side on the compare view (the CLI's default: 2000)
RUN_REPORTS_KEPT = 16  # a run's report is computed once per change of its verdicts
# Each file the pages load: where it lives (package, path) and its media type. The charts'
# stylesheet is the one report.html inlines.
_STATIC = {
    "charts.css": ("spanbudget.collector.charts", "charts.css", "text/css"),
    "ui.css": ("spanbudget.collector.ui", "static/ui.css", "text/css"),
    "ui.js": ("spanbudget.collector.ui", "static/ui.js", "text/javascript"),
    "compare.css": ("spanbudget.collector.ui", "static/compare.css", "text/css"),
}


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("spanbudget.collector.ui", "templates"),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms"] = fmt_ms
    env.filters["pct"] = lambda v: "–" if v is None else f"{v * 100:.1f}%"
    env.filters["clock"] = lambda t: (
        datetime.fromtimestamp(t).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    )
    env.filters["when"] = lambda text: text.replace("T", " ")[:19] if text else ""
    env.globals["band"] = band_class
    env.globals["judge_slo"] = judge_slo
    env.globals["why"] = why
    return env


def _since(text: str | None) -> float | None:
    """`1h` (that long ago), an RFC 3339 time, or `all`/empty (no bound), as Unix seconds."""
    if text is None or not text.strip() or text == "all":
        return None
    try:
        return parse_since(text)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None


def ui_router(
    *,
    budget: Callable[[], Budget],
    store: VerdictStore,
    columns: VerdictColumns,
    spans: SpanSource,
    alerts: BudgetAlerts | None = None,
    jaeger_ui: str | None = None,
    budget_named: Callable[[str], Budget | None] | None = None,
) -> APIRouter:
    """The pages over the verdicts in `store` (read as `columns` for the aggregates),
    judged against `budget()` (the current one), with `alerts`' rules and the traces'
    `spans`; trace links go to `jaeger_ui` when given. `budget_named(name)` is the budget
    that judged verdicts of that name (the current one, or a preset's), None for another:
    a page that shows one budget's verdicts shows its stages and limits."""
    named = budget_named or BudgetNames(budget)
    env = _environment()
    evaluators: dict[int, Judges] = {}
    router = APIRouter()

    def evaluator() -> Judges:
        current = budget()
        if id(current) not in evaluators:  # the budget was reloaded: judge with the new one
            evaluators.clear()
            evaluators[id(current)] = Judges(current)  # as the collector judges
        return evaluators[id(current)]

    def page(name: str, request: Request, **context: Any) -> HTMLResponse:
        """A template with the request's path and the budget in effect (a page may show
        another budget's: `budget` in `context`)."""
        html = env.get_template(name).render(
            **{"request_path": request.url.path, "budget": budget(), **context}
        )
        return HTMLResponse(html)

    def stack_of(verdict: dict[str, Any]) -> Any:
        parts = [StackPart(s["name"], i, s["ms"] or 0.0) for i, s in enumerate(verdict["stages"])]
        total = verdict["total"]
        return stage_stack(parts, limit_ms=total["limit_ms"], target_ms=total["target_ms"])

    def overview_context(since: str, run_id: str | None, chosen: str | None) -> dict[str, Any]:
        """The overview of the verdicts one budget judged: `chosen`, else the budget in
        effect, or (when it judged none in the range) the one that judged the most. A
        recognised library's traces are judged by its preset, whose stages and limits
        differ: one budget at a time, never pooled."""
        start = _since(since)
        now = time.time()
        judged_by = columns.budgets(since=start, run_id=run_id)
        current = budget()
        name = chosen or current.name
        if not chosen and judged_by and current.name not in dict(judged_by):
            name = judged_by[0][0]
        shown = named(name) or current
        selection = columns.select(since=start, run_id=run_id, budget=name)
        first = float(selection.at.min()) if len(selection) else now - 3600
        rules = [r.to_dict() for r in alerts.rule_states()] if alerts is not None else []
        overruns = store.query(
            status=Status.OVERRUN, since=start, run_id=run_id, budget=name, limit=8
        )
        view = build_overview(
            selection,
            shown,
            start=start if start is not None else first,
            end=now,
            rules=rules,
            overruns=overruns,
        )
        query = {"since": since, **({"run_id": run_id} if run_id else {})}
        return {
            "view": view,
            "since": since,
            "run_id": run_id or "",
            "ranges": RANGES,
            "alerts_on": alerts is not None,
            "body_url": "/overview/body?"
            + urlencode({**query, **({"budget": chosen} if chosen else {})}),
            "refresh_seconds": REFRESH_SECONDS,
            "now": now,
            "budget": shown,
            "budget_name": name,
            "current_budget": current.name,
            "chosen_budget": chosen or "",
            "judged_by": [
                (judging, n, "/?" + urlencode({**query, "budget": judging}))
                for judging, n in judged_by
            ],
        }

    def overview_route(path: str, template: str) -> None:
        @router.get(path, response_class=HTMLResponse)
        def overview(
            request: Request,
            since: str = DEFAULT_RANGE,
            run_id: str = "",
            chosen: Annotated[str, Query(alias="budget")] = "",
        ) -> HTMLResponse:
            context = overview_context(since, run_id or None, chosen or None)
            return page(template, request, **context)

    overview_route("/", "overview.html")
    overview_route("/overview/body", "overview_body.html")  # the page's in-place refresh

    @router.get("/traces", response_class=HTMLResponse)
    def trace_list(
        request: Request,
        status: str = "",
        stage: str = "",
        run_id: str = "",
        since: str = "",
        before: str = "",
        chosen: Annotated[str, Query(alias="budget")] = "",
    ) -> HTMLResponse:
        if before and not _TRACE_ID.match(before):
            raise HTTPException(400, "before must be a trace id, 32 hex digits")
        try:
            wanted = Status(status) if status else None
        except ValueError:
            raise HTTPException(400, f"unknown status {status!r}") from None
        found = store.query(
            status=wanted,
            stage=stage or None,
            run_id=run_id or None,
            since=_since(since),
            before=before.lower() or None,
            budget=chosen or None,
            limit=PAGE_SIZE + 1,
        )
        rows = found[:PAGE_SIZE]
        filters = {
            "status": status,
            "stage": stage,
            "run_id": run_id,
            "since": since,
            "budget": chosen,
        }
        kept = {k: v for k, v in filters.items() if v}
        older = None
        if len(found) > PAGE_SIZE:
            older = "/traces?" + urlencode({**kept, "before": rows[-1]["trace_id"]})
        return page(
            "traces.html",
            request,
            rows=[(v, stack_of(v)) for v in rows],
            filters=filters,
            statuses=[s.value for s in Status],
            older=older,
            paged=bool(before),
            newest="/traces?" + urlencode(kept),
            # A budget asked for: its stages in the filter and the legend.
            **({"budget": named(chosen) or budget()} if chosen else {}),
        )

    @router.get("/traces/{trace_id}", response_class=HTMLResponse)
    def trace_page(request: Request, trace_id: str, view: str = "") -> HTMLResponse:
        if not _TRACE_ID.match(trace_id):
            raise HTTPException(400, "trace_id must be 32 hex digits")
        trace_id = trace_id.lower()
        verdict = store.get(trace_id)
        if verdict is None:
            return HTMLResponse(
                env.get_template("missing.html").render(
                    request_path=request.url.path, budget=budget(), trace_id=trace_id
                ),
                status_code=404,
            )
        got = spans.get(trace_id)
        waterfall = None
        rows: list[Any] = []
        spans_note = got if isinstance(got, str) else ""
        rejudged_differs = False
        if isinstance(got, TraceSpans):
            waterfall = build_waterfall(got.spans, evaluator())
            if waterfall is None:
                spans_note = "The current budget does not judge these spans (no stage matches)."
            else:
                rows = list(waterfall.rows)
                again = waterfall.verdict.to_dict()
                rejudged_differs = any(
                    again[k] != verdict[k] for k in ("status", "ttft_ms", "stages", "blame")
                )
        bars = budget_bars(
            [
                BudgetRow(s["name"], i, s["ms"], s["target_ms"], s["limit_ms"], s["status"])
                for i, s in enumerate(verdict["stages"])
            ],
            ttft_ms=verdict["ttft_ms"],
            total_target_ms=verdict["total"]["target_ms"],
            total_limit_ms=verdict["total"]["limit_ms"],
            unattributed_ms=verdict["unattributed_ms"],
        )
        body = {k: v for k, v in verdict.items() if k not in ("spans", "late_spans")}
        return page(
            "trace.html",
            request,
            verdict=verdict,
            waterfall_svg=(
                render_waterfall(waterfall, window=window_of(waterfall, view))
                if waterfall is not None
                else None
            ),
            rows=rows,
            spans_source=got.source if isinstance(got, TraceSpans) else "",
            spans_note=spans_note,
            rejudged_differs=rejudged_differs,
            budget_svg=bars,
            verdict_json=json.dumps(body, indent=2),
            jaeger_url=jaeger_trace_url(jaeger_ui or "", trace_id),
            run_id=verdict.get("attributes", {}).get(LOADTEST_RUN_ID),
        )

    @router.get("/runs", response_class=HTMLResponse)
    def runs(request: Request) -> HTMLResponse:
        return page("runs.html", request, runs=columns.runs())

    def compare_side(label: str, spec: str, phase: str) -> Side:
        """A run's verdicts, or a window's (`2h..1h`); raises SideError."""
        window = parse_window(spec)
        if window is None:
            found = run_verdicts(store, spec)
            kind = "run"
        else:
            since = window.since
            found = page_verdicts(
                lambda before: store.query(since=since, before=before, limit=MAX_LIST),
                window.holds,
            )
            kind = "window"
        side = Side.of_verdicts(label, kind, spec, found, phase=phase or None)
        if not side.samples:
            raise SideError(
                f"{label} {spec}: no judged request" + (f" in phase {phase}" if phase else "")
            )
        return side

    @router.get("/compare", response_class=HTMLResponse)
    def compare_page(
        request: Request, base: str = "", candidate: str = "", phase: str = ""
    ) -> HTMLResponse:
        """Two runs or windows stage by stage (`spanbudget compare`), each stage's two
        distributions, and each side's slowest traces linked to their pages."""
        context: dict[str, Any] = {
            "base": base,
            "candidate": candidate,
            "phase": phase,
            "run_ids": [r[0] for r in columns.runs()],
            "comparison": None,
            "problem": "",
            "spec_is_window": {},
        }
        status = 200
        if base and candidate:
            try:
                before = compare_side("base", base, phase)
                after = compare_side("candidate", candidate, phase)
                sides = (before, after)
                result = compare(before, after, CompareSettings(resamples=COMPARE_RESAMPLES))
                context["comparison"] = render_body(result, trace_url="/traces/")
                context["spec_is_window"] = {s.label: s.kind == "window" for s in sides}
            except SideError as exc:
                context["problem"] = str(exc)
                status = 400
        response = page("compare.html", request, **context)
        response.status_code = status
        return response

    reports: dict[tuple[str, int, float, int], Report] = {}
    reports_lock = threading.Lock()

    def report_of(run_id: str) -> Report | None:
        """The run's report, computed again only when its verdicts (or the budget) change."""
        held = next((r for r in columns.runs() if r[0] == run_id), None)
        key = (run_id, held[1], held[3], id(budget())) if held else None
        with reports_lock:
            if key is not None and key in reports:
                return reports[key]
        verdicts = run_verdicts(store, run_id)
        if not verdicts:
            return None
        report = run_report(verdicts, budget(), run_id)
        if key is not None:
            with reports_lock:
                if len(reports) >= RUN_REPORTS_KEPT:
                    reports.pop(next(iter(reports)))
                reports[key] = report
        return report

    @router.get("/runs/{run_id:path}", response_class=HTMLResponse)  # ids may hold "/"
    def run_page(request: Request, run_id: str) -> HTMLResponse:
        report = report_of(run_id)
        if report is None:
            raise HTTPException(404, f"no verdicts carry loadtest.run_id={run_id!r}")
        rows = [
            BandRow(
                s.name,
                s.target_ms,
                s.limit_ms,
                s.summary.p50_ms,
                s.summary.p95_ms,
                s.summary.p99_ms,
            )
            for s in report.stages
        ]
        ttft = report.ttft
        rows.append(
            BandRow(
                "TTFT",
                report.total_target_ms,
                report.total_limit_ms,
                ttft.p50_ms,
                ttft.p95_ms,
                ttft.p99_ms,
            )
        )
        return page("run.html", request, report=report, run_id=run_id, bands_svg=stage_bands(rows))

    @router.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in _STATIC:
            raise HTTPException(404, "no such file")
        package, path, media_type = _STATIC[name]
        text = resources.files(package).joinpath(path)
        return Response(
            text.read_text(encoding="utf-8"),
            media_type=media_type,
            headers={"Cache-Control": "max-age=300"},
        )

    @router.get("/trace/{trace_id}", include_in_schema=False)
    def trace_alias(trace_id: str) -> RedirectResponse:
        """Jaeger's spelling of a trace URL, for people who type it."""
        return RedirectResponse(f"/traces/{trace_id}", status_code=308)

    return router
