"""`sweep.html`: one chart of a sweep (rate on x, each stage's p95 as a share of its own
limit on y, so that every stage meets its limit on one line) and the knee table, drawn
with the charts the web UI and report.html share, in their colours, light and dark."""

from __future__ import annotations

from importlib import resources

from markupsafe import Markup

from ..charts import esc, fmt_ms, nice_ticks, num, stage_class, svg_root
from ..links import ui_run_url
from ..stats import CONFIDENCE, min_count
from .render_sweep import first_break_line, knee_cells
from .sweep import (
    SLO_ROW,
    TTFT_ROW,
    Decision,
    Sweep,
    SweepStep,
    rate_label,
)

__all__ = ["sweep_chart", "sweep_page"]

_TOP_CAP = 4.0  # the y axis stops at 400 % of the limit; points beyond sit on the edge
_DODGE = 5.0  # px between the stages' points at one rate, so that intervals stay apart


def _series(sweep: Sweep) -> list[tuple[str, str, float]]:
    """(row, CSS class, limit ms) of every line: the stages, then TTFT."""
    lines = [(name, stage_class(i), limit) for i, (name, limit) in
             enumerate(sweep.limits_ms.items())]  # fmt: skip
    return [*lines, (TTFT_ROW, "ttft", sweep.total_limit_ms)]


def sweep_chart(sweep: Sweep, *, width: float = 760, height: float = 330) -> Markup:
    """Each stage's p95 ÷ its limit at each rate, with its 95 % interval as a whisker (open
    at the top when nothing bounds it); the dashed line is every limit. A point is filled
    when the step decides it, hollow when not; a step with too few values has none."""
    left, right, top_pad, bottom = 48.0, 14.0, 24.0, 38.0
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    steps = list(sweep.steps)
    rates = [s.rate for s in steps] or [0.0]
    lo_rate, hi_rate = min(rates), max(rates)
    if hi_rate == lo_rate:
        lo_rate, hi_rate = lo_rate - 1.0, hi_rate + 1.0
    pad = (hi_rate - lo_rate) * 0.04
    lo_rate, hi_rate = lo_rate - pad, hi_rate + pad
    series = _series(sweep)
    ratios = [
        v / limit
        for name, _, limit in series
        for s in steps
        if (f := sweep.figure(s, name)) is not None
        for v in (f.p95_ms, f.high_ms)
        if v is not None and limit > 0
    ]
    top = min(max([1.3, *(r * 1.05 for r in ratios)]), _TOP_CAP)

    def x(rate: float) -> float:
        return left + (rate - lo_rate) / (hi_rate - lo_rate) * plot_w

    def y(ratio: float) -> float:
        return top_pad + plot_h - min(ratio, top) / top * plot_h

    body = [
        f'<rect class="frame" x="{num(left)}" y="{num(top_pad)}" width="{num(plot_w)}" '
        f'height="{num(plot_h)}"/>'
    ]
    for tick in nice_ticks(0.0, top, 5):
        body.append(
            f'<line class="grid" x1="{num(left)}" x2="{num(left + plot_w)}" '
            f'y1="{num(y(tick))}" y2="{num(y(tick))}"/>'
            f'<text class="tick" x="{num(left - 4)}" y="{num(y(tick) + 3)}" '
            f'text-anchor="end">{tick:.0%}</text>'
        )
    for tick in nice_ticks(max(lo_rate, 0.0), hi_rate, 8):
        body.append(
            f'<text class="tick" x="{num(x(tick))}" y="{num(top_pad + plot_h + 14)}" '
            f'text-anchor="middle">{tick:g}</text>'
        )
    body.append(
        f'<text class="tick" x="{num(left + plot_w / 2)}" y="{num(height - 6)}" '
        'text-anchor="middle">requests per second</text>'
        f'<text class="tick" x="0" y="{num(top_pad - 4)}">p95 ÷ limit</text>'
        f'<line class="mark limit" x1="{num(left)}" x2="{num(left + plot_w)}" '
        f'y1="{num(y(1.0))}" y2="{num(y(1.0))}" data-ratio="1"/>'
    )
    for index, (name, cls, limit) in enumerate(series):
        dx = (index - (len(series) - 1) / 2) * _DODGE
        body.append(f'<g class="sweep-line" data-stage="{esc(name)}">')
        points: list[str] = []
        marks: list[str] = []
        for step in steps:
            figure = sweep.figure(step, name)
            decision = sweep.decision(step, name)
            if figure is None or figure.p95_ms is None or decision is Decision.FEW:
                if len(points) > 1:
                    body.append(f'<polyline class="line {cls}" points="{" ".join(points)}"/>')
                points = []
                continue
            px = x(step.rate) + dx
            points.append(f"{num(px)},{num(y(figure.p95_ms / limit))}")
            high = figure.high_ms
            whisker_top = y(high / limit) if high is not None else top_pad
            marks.append(
                f'<line class="whisker-{cls}{"" if high is not None else " open"}" '
                f'x1="{num(px)}" x2="{num(px)}" y1="{num(y((figure.low_ms or 0.0) / limit))}" '
                f'y2="{num(whisker_top)}"/>'
            )
            interval = f"{fmt_ms(figure.low_ms)}–{fmt_ms(high) if high is not None else '?'}"
            marks.append(
                f'<circle class="pt {cls} d-{decision.name.lower()}" cx="{num(px)}" '
                f'cy="{num(y(figure.p95_ms / limit))}" r="3.5" data-rate="{num(step.rate)}" '
                f'data-p95-ms="{num(figure.p95_ms)}"><title>{esc(name)} at '
                f"{rate_label(step.rate)} req/s: p95 {fmt_ms(figure.p95_ms)} ms "
                f"({CONFIDENCE:.0%} interval {interval}) against a {limit:g} ms limit: "
                f"{decision.value}</title></circle>"
            )
        if len(points) > 1:
            body.append(f'<polyline class="line {cls}" points="{" ".join(points)}"/>')
        body.extend(marks)
        body.append("</g>")
    knees = {k.name: k for k in sweep.knees()}
    label = "Each stage's p95 against its limit by request rate: " + "; ".join(
        f"{name} holds to {_rate(knees[name].holds_to)} req/s, breaks at "
        f"{_rate(knees[name].breaks_at)}"
        for name, _, _ in series
    )
    return svg_root(width, height, label, body, "sweep")


def _rate(rate: float | None) -> str:
    return "—" if rate is None else rate_label(rate)


_PAGE_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem auto; max-width: 820px;
  padding: 0 1rem; background: var(--bg); color: var(--fg); }
a { color: var(--link); } h1 { font-size: 1.3rem; } h2 { font-size: 1.05rem; margin-top: 1.6rem; }
.muted { color: var(--muted); } .scroll { overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: .2rem .55rem; border-bottom: 1px solid var(--line); text-align: right; }
th:first-child, td:first-child { text-align: left; }
.d-over { color: var(--over); font-weight: 600; } .d-not_decided { color: var(--warn); }
.d-within { color: var(--ok); } .d-few { color: var(--muted); }
svg .line.ttft { fill: none; stroke: var(--fg); stroke-dasharray: 4 3; }
svg .pt.ttft { fill: var(--fg); stroke: var(--fg); }
svg circle.pt { stroke-width: 1.5; } svg circle.pt.d-not_decided { fill: var(--bg); }
svg [class^="whisker-"] { stroke-width: 1.2; stroke-opacity: .55; }
svg .whisker-ttft { stroke: var(--fg); }
svg .open { stroke-dasharray: 2 2; }
"""


def _whisker_css() -> str:
    return "".join(f"svg .whisker-s{i} {{ stroke: var(--s{i}); }}\n" for i in range(7))


def _cell(sweep: Sweep, step: SweepStep, row: str) -> str:
    decision = sweep.decision(step, row)
    if row == SLO_ROW:
        text = "—" if step.share is None else f"{step.share:.1%}"
        return f'<td class="d-{decision.name.lower()}" title="{decision.value}">{text}</td>'
    figure = sweep.figure(step, row)
    if figure is None or figure.p95_ms is None or decision is Decision.FEW:
        return '<td class="d-few">few</td>'
    high = fmt_ms(figure.high_ms) if figure.high_ms is not None else "?"
    title = f"{CONFIDENCE:.0%} interval {fmt_ms(figure.low_ms)}–{high} ms: {decision.value}"
    return (
        f'<td class="d-{decision.name.lower()}" title="{esc(title)}">{fmt_ms(figure.p95_ms)}</td>'
    )


def sweep_page(sweep: Sweep) -> str:
    """The whole page: the chart with its key, the knee table, a row per step."""
    css = resources.files("spanbudget.collector.charts").joinpath("charts.css")
    keys = "".join(
        f'<span class="key {cls}"></span>{esc(name)} ({limit:g} ms)'
        for name, cls, limit in _series(sweep)
        if cls != "ttft"
    )
    knee_rows = []
    for knee in sweep.knees():
        limit, holds, undecided, breaks, there = knee_cells(sweep, knee)
        label = "within every limit (share)" if knee.name == SLO_ROW else knee.name
        knee_rows.append(
            f"<tr><td>{esc(label)}</td><td>{esc(limit)}</td><td>{esc(holds)}</td>"
            f"<td>{esc(undecided)}</td><td>{esc(breaks)}</td><td>{esc(there)}</td></tr>"
        )
    head = "".join(f"<th>{esc(n)}</th>" for n in sweep.limits_ms)
    step_rows = []
    for step in sweep.steps:
        folder = f"r{rate_label(step.rate)}"
        ui = ui_run_url(sweep.ui_url, step.run_id)
        run = f'<a href="{esc(ui)}">{esc(step.run_id)}</a>' if ui else esc(step.run_id)
        cells = "".join(_cell(sweep, step, row) for row in sweep.rows)
        step_rows.append(
            f"<tr><td>{rate_label(step.rate)}</td><td>{step.requests}</td>"
            f"<td>{step.sent_rps:.1f}</td>{cells}<td>{run} · "
            f'<a href="{folder}/report.html">report</a></td></tr>'
        )
    failed = ""
    if sweep.failed:
        failed = f'<p class="d-over">The sweep stopped early: {esc(sweep.failed)}</p>'

    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sweep {esc(sweep.run_id)} · spanbudget</title>
<style>{css.read_text(encoding="utf-8")}{_PAGE_STYLE}{_whisker_css()}</style></head>
<body>
<h1>Sweep {esc(sweep.run_id)}: where each stage leaves its limit</h1>
<p class="muted">Budget {esc(sweep.budget_name)}; rates {
        esc(", ".join(rate_label(r) for r in sweep.rates))
    } req/s, one load-test run a step. A stage holds at
a rate when the whole {CONFIDENCE:.0%} interval of its p95 is within its limit, breaks when the
whole interval is above it; otherwise it is not decided. A step with fewer than
{min_count(95)} values has no p95 (few).</p>
{failed}
<p>{esc(first_break_line(sweep))}.</p>
<div class="chart-wrap">{sweep_chart(sweep)}</div>
<p class="muted">{keys}<span class="key"></span>TTFT ({sweep.total_limit_ms:g} ms, dashed)
<span class="key mark-limit"></span>each limit (100 %). Filled: decided; hollow: not
decided; whiskers: the p95's {CONFIDENCE:.0%} interval (dotted to the top: unbounded).</p>
<h2>Knee per stage</h2>
<div class="scroll"><table><thead><tr><th>stage</th><th>limit</th><th>holds to</th>
<th>not decided</th><th>breaks at</th><th>p95 there (interval)</th></tr></thead>
<tbody>{"".join(knee_rows)}</tbody></table></div>
<h2>Each step (p95 ms)</h2>
<div class="scroll"><table><thead><tr><th>req/s</th><th>n</th><th>sent/s</th>{head}
<th>TTFT</th><th>within</th><th>run</th></tr></thead>
<tbody>{"".join(step_rows)}</tbody></table></div>
</body></html>
"""
