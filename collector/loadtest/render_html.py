"""`report.html`: one self-contained page for a performance review of a run, drawn with the
web UI's own SVG charts and stylesheet (no script, no images, no plotting library).

What it shows, top to bottom: the SLO line with its Wilson interval; throughput; each
stage against its target and limit (p50–p99 on its own scale), each stage's whole
distribution, the time to first token as the traces and as the client saw it; the phases
side by side (client TTFT, inter-token and request latency, throughput, each stage's p95);
each stage's p95 over the run; the slowest traces, linked into the web UI and Jaeger.
Percentiles are not added up anywhere: a p99 of a sum is not the sum of p99s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from ..charts import (
    BandRow,
    band_class,
    bin_counts,
    fmt_ms,
    histogram,
    p95_panels,
    round_edges,
    stage_bands,
)
from ..judging.verdict import Status
from ..links import ui_run_url, ui_traces_url
from ..stats import (
    PERCENTILES,
    StageSummary,
    enough_for,
    judge_slo,
    percentile,
)
from ..stats.table import few_note
from .records import RequestResult
from .report_model import Report

__all__ = ["PhaseFigures", "phase_figures", "render_html"]

STAGE_BINS = 30


@dataclass(frozen=True, slots=True)
class PhaseFigures:
    """What the client saw in one phase, and how much of it fit the budget."""

    name: str
    requests: int
    errors: int
    within: int  # requests within every limit
    duration_s: float  # from the phase's first send to its last response
    client_ttft: StageSummary
    itl: StageSummary
    request_total: StageSummary
    output_tokens: int

    @property
    def sent_rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def goodput_rps(self) -> float:
        return self.within / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s > 0 else 0.0


def phase_figures(results: Sequence[RequestResult]) -> list[PhaseFigures]:
    """Per phase, in the order the phases ran; the whole run last when there are several."""
    order: dict[str, list[RequestResult]] = {}
    for result in results:
        order.setdefault(result.request.phase, []).append(result)
    figures = [_figures(name, rows) for name, rows in order.items()]
    if len(figures) > 1:
        figures.append(_figures("whole run", list(results)))
    return figures


def _figures(name: str, rows: Sequence[RequestResult]) -> PhaseFigures:
    requests = [r.request for r in rows]
    start = min((r.sent_s for r in requests), default=0.0)
    end = max((r.sent_s + r.total_ms / 1000 for r in requests), default=0.0)
    return PhaseFigures(
        name=name,
        requests=len(rows),
        errors=sum(not r.ok for r in requests),
        within=sum(r.verdict is not None and r.verdict.within_limits for r in rows),
        duration_s=end - start,
        client_ttft=StageSummary.of_times(r.ttft_ms for r in requests if r.ttft_ms is not None),
        itl=StageSummary.of_times(r.itl_mean_ms for r in requests if r.itl_mean_ms is not None),
        request_total=StageSummary.of_times(r.total_ms for r in requests if r.ok),
        output_tokens=sum(r.output_tokens for r in requests),
    )


def _stage_values(results: Sequence[RequestResult], name: str) -> list[float]:
    values = []
    for result in results:
        verdict = result.verdict
        if verdict is None or not verdict.timed:
            continue
        stage = verdict.stages.get(name)
        if stage is not None and stage.ms is not None and stage.status is not Status.ABSENT:
            values.append(stage.ms)
    return values


def _distribution(
    values: Sequence[float], target_ms: float, limit_ms: float, *, width: float, height: float
) -> Markup:
    ordered = sorted(values)
    p99 = percentile(ordered, 99) if ordered else None
    edges = round_edges(max(limit_ms * 1.4, (p99 or 0.0) * 1.1, target_ms, 1.0), STAGE_BINS)
    return histogram(
        edges, bin_counts(ordered, edges), target_ms=target_ms, limit_ms=limit_ms,
        width=width, height=height,
    )  # fmt: skip


def _over_time(report: Report) -> Markup | None:
    points = report.stage_p95_over_time
    if len(points) < 2:
        return None
    started = datetime.fromisoformat(report.info.started_at).timestamp()
    window = points[1].t_s - points[0].t_s
    series = [
        (s.name, i, s.target_ms, s.limit_ms, [p.stage_p95_ms.get(s.name) for p in points])
        for i, s in enumerate(report.stages)
    ]
    starts = [started + p.t_s for p in points]
    return p95_panels(starts, starts[-1] + window, series, width=960)


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("spanbudget.collector.loadtest", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms"] = fmt_ms
    env.filters["pct"] = lambda v: "–" if v is None else f"{v:.1%}"
    env.globals["enough_for"] = enough_for
    env.globals["band"] = band_class
    env.globals["few_note"] = few_note()
    return env


def _stylesheet() -> Markup:
    text = resources.files("spanbudget.collector.charts").joinpath("charts.css")
    return Markup(text.read_text(encoding="utf-8"))


def render_html(report: Report, results: Sequence[RequestResult]) -> str:
    """The page, from the report and the records it was computed from."""
    rows = [
        BandRow(s.name, s.target_ms, s.limit_ms, s.summary.p50_ms, s.summary.p95_ms,
                s.summary.p99_ms)
        for s in report.stages
    ]  # fmt: skip
    ttft = report.ttft
    rows.append(
        BandRow("TTFT", report.total_target_ms, report.total_limit_ms, ttft.p50_ms,
                ttft.p95_ms, ttft.p99_ms)
    )  # fmt: skip
    distributions = [
        (s, _distribution(_stage_values(results, s.name), s.target_ms, s.limit_ms,
                          width=310, height=130))
        for s in report.stages
    ]  # fmt: skip
    trace_ttfts = [
        r.verdict.ttft_ms
        for r in results
        if r.verdict is not None and r.verdict.timed and r.verdict.ttft_ms is not None
    ]
    client_ttfts = [r.request.ttft_ms for r in results if r.request.ttft_ms is not None]
    info = report.info
    return _environment().get_template("report.html").render(
        report=report,
        info=info,
        stylesheet=_stylesheet(),
        slo=judge_slo(round(report.within_limits * report.requests), report.requests,
                      report.slo_objective),
        bands_svg=stage_bands(rows, width=960),
        distributions=distributions,
        trace_ttft_svg=_distribution(trace_ttfts, report.total_target_ms, report.total_limit_ms,
                                     width=470, height=170),
        client_ttft_svg=_distribution(client_ttfts, report.total_target_ms,
                                      report.total_limit_ms, width=470, height=170),
        over_time_svg=_over_time(report),
        phases=phase_figures(results),
        quantiles=[f"p{q:g}" for q in PERCENTILES],
        run_url=ui_run_url(info.ui_url, info.run_id),
        traces_url=ui_traces_url(info.ui_url, info.run_id),
    )  # fmt: skip
