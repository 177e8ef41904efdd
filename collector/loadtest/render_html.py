"""`report.html`: one self-contained page with the run's charts (PNG inlined) and tables."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from spanbudget.collector.loadtest.records import RequestResult
from spanbudget.collector.loadtest.report_model import Report

__all__ = ["render_html"]

STAGE_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1"]


def _png(figure: Figure) -> str:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def _stacked_bars(report: Report) -> Figure:
    """Per-stage percentiles stacked, next to the allocation's targets and limits."""
    stages = report.stages
    rows: list[tuple[str, list[float]]] = [
        ("target", [s.target_ms for s in stages]),
        ("limit", [s.limit_ms for s in stages]),
        ("p50", [s.summary.p50_ms or 0.0 for s in stages]),
        ("p95", [s.summary.p95_ms or 0.0 for s in stages]),
        ("p99", [s.summary.p99_ms or 0.0 for s in stages]),
    ]
    figure = Figure(figsize=(8, 3.2))
    axes = figure.add_subplot()
    for y, (label, values) in enumerate(rows):
        left = 0.0
        for i, value in enumerate(values):
            axes.barh(
                y,
                value,
                left=left,
                color=STAGE_COLOURS[i % len(STAGE_COLOURS)],
                alpha=0.45 if label in ("target", "limit") else 0.95,
                label=stages[i].name if y == 0 else None,
                edgecolor="white",
            )
            left += value
    axes.axvline(report.total_limit_ms, color="#c00", linestyle="--", label="total limit")
    axes.axvline(report.total_target_ms, color="#777", linestyle=":", label="total target")
    axes.set_yticks(range(len(rows)), [label for label, _ in rows])
    axes.invert_yaxis()
    axes.set_xlabel("ms (stage percentiles stacked)")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=7, ncol=4)
    axes.set_title("Stages at p50 / p95 / p99 against the allocation")
    return figure


def _ttft_histogram(report: Report, results: Sequence[RequestResult]) -> Figure:
    values = [
        r.verdict.ttft_ms
        for r in results
        if r.verdict is not None and r.verdict.ttft_ms is not None
    ]
    figure = Figure(figsize=(8, 3))
    axes = figure.add_subplot()
    if values:
        axes.hist(values, bins=min(40, max(5, len(values) // 3)), color="#4e79a7")
    axes.axvline(report.total_target_ms, color="#e8a200", linestyle=":", label="target")
    axes.axvline(report.total_limit_ms, color="#c00", linestyle="--", label="limit")
    axes.set_xlabel("TTFT ms (trace, from the verdicts)")
    axes.set_ylabel("requests")
    axes.legend(fontsize=8)
    axes.set_title("TTFT distribution")
    return figure


def _p95_over_time(report: Report) -> Figure:
    points = report.stage_p95_over_time
    figure = Figure(figsize=(8, 3))
    axes = figure.add_subplot()
    for i, stage in enumerate(report.stages):
        colour = STAGE_COLOURS[i % len(STAGE_COLOURS)]
        mine = [(p.t_s, p.stage_p95_ms.get(stage.name)) for p in points]
        xs = [t for t, value in mine if value is not None]
        ys = [value for _, value in mine if value is not None]
        axes.plot(xs, ys, marker="o", color=colour, label=stage.name)
        axes.axhline(stage.limit_ms, color=colour, linestyle="--", linewidth=0.8)
    axes.set_xlabel("scheduled time in the run, s (5 s windows)")
    axes.set_ylabel("p95 ms (dashed: limit)")
    axes.legend(fontsize=7, ncol=3)
    axes.set_title("Each stage's p95 over the run")
    return figure


def _table(headers: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def render_html(report: Report, results: Sequence[RequestResult]) -> str:
    charts = [
        ("stages", _stacked_bars(report)),
        ("ttft", _ttft_histogram(report, results)),
        ("over-time", _p95_over_time(report)),
    ]
    images = "\n".join(
        f'<img id="chart-{name}" alt="{name} chart" src="data:image/png;base64,{_png(fig)}">'
        for name, fig in charts
    )
    stage_rows = [
        [
            s.name,
            f"{s.target_ms:g}",
            f"{s.limit_ms:g}",
            *(
                _ms(v)
                for v in (
                    s.summary.p50_ms,
                    s.summary.p90_ms,
                    s.summary.p95_ms,
                    s.summary.p99_ms,
                    s.summary.max_ms,
                )
            ),
            _share(s.summary.over_limit_share),
        ]
        for s in report.stages
    ]
    slowest = [
        [i.trace_id, f"{i.ttft_ms:.1f}", i.status, ", ".join(i.blame)] for i in report.slowest
    ]
    info = report.info
    met = report.slo_met
    title = f"spanbudget run {info.run_id}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 60em; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 0.2em 0.7em; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
img {{ display: block; margin: 1em 0; max-width: 100%; }}
.met {{ color: #080; }} .breached {{ color: #c00; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{report.requests} requests to {html.escape(info.target)} (model
{html.escape(info.model)}), started {html.escape(info.started_at)}, budget
<b>{html.escape(report.budget_name)}</b>.</p>
<p class="{"met" if met else "breached"}">SLO {"met" if met else "breached"}:
{report.within_limits:.1%} of requests within every limit (objective {report.slo_objective:.0%}).
Goodput {report.goodput_rps:.2f} req/s; errors {report.errors}
({report.error_rate:.1%}).</p>
{_table(["stage", "target", "limit", "p50", "p90", "p95", "p99", "max", "> limit"], stage_rows)}
{images}
<h2>Slowest traces</h2>
{_table(["trace", "TTFT ms", "status", "blame"], slowest)}
</body></html>
"""
