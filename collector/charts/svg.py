"""The charts of the web UI and of `report.html`: pure functions from numbers to inline SVG
(no script, no fonts), so a run looks the same in the report as on its page.

Colours come from CSS classes (`s0`..`s6` for stages in budget order; `ok`, `warn`,
`over` for the budget bands) that `charts.css` defines, dark mode included.
Every chart carries `role="img"` and a text alternative; the pages put the same numbers in
a table beside it.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup

__all__ = [
    "BandRow",
    "BudgetRow",
    "ShareRow",
    "StackPart",
    "band_class",
    "bin_counts",
    "budget_bars",
    "esc",
    "fmt_ms",
    "histogram",
    "nice_ticks",
    "num",
    "p95_panels",
    "round_edges",
    "share_bars",
    "share_panels",
    "stage_bands",
    "stage_class",
    "stage_stack",
    "svg_root",
]

STAGE_CLASSES = 7  # s0..s6, then around again


def fmt_ms(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def num(value: float) -> str:
    """A coordinate: two decimals at most, no trailing zeros."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _segments(
    xs: Sequence[float],
    values: Sequence[float | None],
    x: Callable[[float], float],
    y: Callable[[float], float],
) -> list[str]:
    """Polyline points, one run per stretch of known values (a None breaks the line)."""
    segments: list[list[str]] = [[]]
    for at, value in zip(xs, values, strict=True):
        if value is None:
            if segments[-1]:
                segments.append([])
            continue
        segments[-1].append(f"{num(x(at))},{num(y(value))}")
    return [" ".join(points) for points in segments if points]


def band_class(ms: float | None, target: float, limit: float) -> str:
    if ms is None:
        return "none"
    return "ok" if ms <= target else "warn" if ms <= limit else "over"


def stage_class(index: int) -> str:
    return f"s{index % STAGE_CLASSES}"


def svg_root(
    width: float, height: float, label: str, body: list[str], cls: str, **data: str
) -> Markup:
    attrs = "".join(f' data-{k.replace("_", "-")}="{esc(v)}"' for k, v in data.items())
    return Markup(
        f'<svg class="chart {cls}" viewBox="0 0 {num(width)} {num(height)}" '
        f'width="{num(width)}" height="{num(height)}" role="img" aria-label="{esc(label)}"'
        f'{attrs} xmlns="http://www.w3.org/2000/svg"><title>{esc(label)}</title>'
        + "".join(body)
        + "</svg>"
    )


# -- overview: stage percentiles against target and limit -----------------------------------


@dataclass(frozen=True, slots=True)
class BandRow:
    name: str
    target_ms: float
    limit_ms: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None


def stage_bands(rows: Sequence[BandRow], *, width: float = 760) -> Markup:
    """One row per stage: green up to the target, yellow up to the limit, red beyond; the
    whisker runs from p50 to p99 and the dot is p95. Each row has its own scale."""
    label_w, value_w, row_h = 92.0, 220.0, 38.0
    plot_w = width - label_w - value_w
    body: list[str] = []
    for i, row in enumerate(rows):
        y = i * row_h + 6
        top = max(row.limit_ms * 1.5, (row.p99_ms or 0) * 1.08, 1.0)
        scale = plot_w / top

        def x(ms: float, scale: float = scale, top: float = top) -> float:
            return label_w + min(ms, top) * scale

        body.append(f'<g class="band-row" data-stage="{esc(row.name)}">')
        body.append(f'<text class="label" x="0" y="{num(y + 14)}">{esc(row.name)}</text>')
        for cls, lo, hi in (
            ("ok", 0.0, row.target_ms),
            ("warn", row.target_ms, row.limit_ms),
            ("over", row.limit_ms, top),
        ):
            body.append(
                f'<rect class="band {cls}" x="{num(x(lo))}" y="{num(y)}" '
                f'width="{num(max(0.0, x(hi) - x(lo)))}" height="20"/>'
            )
        for ms, text in ((row.target_ms, "target"), (row.limit_ms, "limit")):
            body.append(
                f'<text class="tick" x="{num(x(ms))}" y="{num(y + 31)}" text-anchor="middle">'
                f"{esc(fmt_ms(ms))}</text>"
            )
            del text
        if row.p50_ms is not None and row.p99_ms is not None and row.p95_ms is not None:
            mid = y + 10
            body.append(
                f'<line class="whisker" x1="{num(x(row.p50_ms))}" x2="{num(x(row.p99_ms))}" '
                f'y1="{num(mid)}" y2="{num(mid)}"/>'
            )
            for ms, q in ((row.p50_ms, "p50"), (row.p99_ms, "p99")):
                body.append(
                    f'<line class="q {q}" x1="{num(x(ms))}" x2="{num(x(ms))}" '
                    f'y1="{num(mid - 6)}" y2="{num(mid + 6)}" data-ms="{num(ms)}"/>'
                )
            cls = band_class(row.p95_ms, row.target_ms, row.limit_ms)
            body.append(
                f'<circle class="q p95 dot-{cls}" cx="{num(x(row.p95_ms))}" cy="{num(mid)}" r="5" '
                f'data-ms="{num(row.p95_ms)}"/>'
            )
            body.append(
                f'<text class="value" x="{num(width - value_w + 8)}" y="{num(y + 14)}">'
                f"p50 {fmt_ms(row.p50_ms)} · p95 <tspan class='v-{cls}'>{fmt_ms(row.p95_ms)}"
                f"</tspan> · p99 {fmt_ms(row.p99_ms)}</text>"
            )
        else:
            body.append(
                f'<text class="value muted" x="{num(width - value_w + 8)}" y="{num(y + 14)}">'
                "no measurements</text>"
            )
        body.append("</g>")
    label = "Stage percentiles against target and limit: " + "; ".join(
        f"{r.name} p95 {fmt_ms(r.p95_ms)} ms (target {fmt_ms(r.target_ms)}, "
        f"limit {fmt_ms(r.limit_ms)})"
        for r in rows
    )
    return svg_root(width, len(rows) * row_h + 4, label, body, "bands")


# -- distributions: a histogram ------------------------------------------------------------


def round_edges(top: float, bins: int) -> list[float]:
    """Bin edges from 0 to at least `top`, at a round width (1, 2, 2.5 or 5 × 10^n), about
    `bins` of them."""
    raw = max(top, 1e-9) / bins
    magnitude = 10 ** math.floor(math.log10(raw))
    width = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * width for i in range(math.ceil(top / width) + 1)]


def bin_counts(values: Iterable[float], edges: Sequence[float]) -> list[int]:
    """How many values fall in each bin of equal width (`round_edges`); the last bin holds
    everything past it."""
    width = edges[1] - edges[0]
    counts = [0] * (len(edges) - 1)
    for value in values:
        counts[min(len(counts) - 1, max(0, math.floor((value - edges[0]) / width)))] += 1
    return counts


def histogram(
    edges: Sequence[float],
    counts: Sequence[int],
    *,
    target_ms: float,
    limit_ms: float,
    width: float = 640,
    height: float = 190,
    what: str = "TTFT",
    noun: str = "traces",
) -> Markup:
    """Bars of counts per bin of ms, coloured by band, with the target and the limit marked;
    `what` and `noun` name the times and what they are of, for the text alternative."""
    left, bottom, top_pad = 40.0, 28.0, 22.0
    plot_w, plot_h = width - left - 8, height - bottom - top_pad
    span = edges[-1] - edges[0] or 1.0
    peak = max(counts, default=0) or 1

    def x(ms: float) -> float:
        return left + (ms - edges[0]) / span * plot_w

    body = [
        f'<line class="axis" x1="{num(left)}" x2="{num(width - 8)}" '
        f'y1="{num(top_pad + plot_h)}" y2="{num(top_pad + plot_h)}"/>'
    ]
    for lo, hi, count in zip(edges[:-1], edges[1:], counts, strict=True):
        h = count / peak * plot_h
        cls = band_class(hi, target_ms, limit_ms)
        body.append(
            f'<rect class="bar {cls}" x="{num(x(lo) + 0.5)}" y="{num(top_pad + plot_h - h)}" '
            f'width="{num(max(0.5, x(hi) - x(lo) - 1))}" height="{num(h)}" data-count="{count}">'
            f"<title>{fmt_ms(lo)}–{fmt_ms(hi)} ms: {count}</title></rect>"
        )
    for ms, name, anchor, dx in ((target_ms, "target", "end", -3), (limit_ms, "limit", "start", 3)):
        body.append(
            f'<line class="mark {name}" x1="{num(x(ms))}" x2="{num(x(ms))}" '
            f'y1="{num(top_pad - 4)}" '
            f'y2="{num(top_pad + plot_h)}" data-ms="{num(ms)}"/>'
            f'<text class="tick" x="{num(x(ms) + dx)}" y="{num(top_pad - 6)}" '
            f'text-anchor="{anchor}">{name} {fmt_ms(ms)}</text>'
        )
    for ms in nice_ticks(edges[0], edges[-1], 6):
        if x(ms) > width - 30:
            continue  # the unit's place
        body.append(
            f'<text class="tick" x="{num(x(ms))}" y="{num(height - 10)}" text-anchor="middle">'
            f"{fmt_ms(ms)}</text>"
        )
    body.append(
        f'<text class="tick" x="0" y="{num(top_pad + 4)}">{peak}</text>'
        f'<text class="tick" x="{num(width - 8)}" y="{num(height - 10)}" '
        'text-anchor="end">ms</text>'
    )
    label = (
        f"{what} distribution of {sum(counts)} {noun} from {fmt_ms(edges[0])} to "
        f"{fmt_ms(edges[-1])} ms; target {fmt_ms(target_ms)} ms, limit {fmt_ms(limit_ms)} ms"
    )
    return svg_root(width, height, label, body, "histogram")


def nice_ticks(lo: float, hi: float, count: int) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


# -- overview: per-stage p95 over time ------------------------------------------------------


def p95_panels(
    starts: Sequence[float],
    end: float,
    series: Sequence[tuple[str, int, float, float, Sequence[float | None]]],
    *,
    width: float = 640,
) -> Markup:
    """Small multiples, one per stage: p95 per time slice against the stage's limit (dashed)
    and target (dotted). `series`: (name, colour index, target, limit, values)."""
    cols = 3 if len(series) > 4 else max(1, len(series))
    panel_w, panel_h, gap = (width - (cols - 1) * 12) / cols, 96.0, 12.0
    rows = math.ceil(len(series) / cols)
    body: list[str] = []
    t0, t1 = (starts[0] if starts else 0.0), end
    dt = (t1 - t0) or 1.0
    slot = dt / max(1, len(starts))
    for i, (name, colour, target, limit, values) in enumerate(series):
        ox = (i % cols) * (panel_w + gap)
        oy = (i // cols) * (panel_h + gap)
        plot_top, plot_h = oy + 16, panel_h - 34
        known = [v for v in values if v is not None]
        top = max(limit * 1.3, max(known, default=0.0) * 1.05, 1.0)

        def y(
            ms: float, top: float = top, plot_top: float = plot_top, plot_h: float = plot_h
        ) -> float:
            return plot_top + plot_h - min(ms, top) / top * plot_h

        def x(t: float, ox: float = ox) -> float:
            return ox + (t - t0) / dt * panel_w

        body.append(f'<g class="panel" data-stage="{esc(name)}">')
        body.append(
            f'<rect class="frame" x="{num(ox)}" y="{num(plot_top)}" width="{num(panel_w)}" '
            f'height="{num(plot_h)}"/>'
            f'<text class="label" x="{num(ox)}" y="{num(oy + 11)}">{esc(name)}</text>'
        )
        for ms, cls in ((limit, "limit"), (target, "target")):
            body.append(
                f'<line class="mark {cls}" x1="{num(ox)}" x2="{num(ox + panel_w)}" '
                f'y1="{num(y(ms))}" y2="{num(y(ms))}"/>'
            )
        for seg in _segments([start + slot / 2 for start in starts], values, x, y):
            body.append(f'<polyline class="line {stage_class(colour)}" points="{seg}"/>')
        last = known[-1] if known else None
        body.append(
            f'<text class="tick" x="{num(ox + panel_w)}" y="{num(oy + 11)}" text-anchor="end">'
            f"limit {fmt_ms(limit)} · last p95 "
            f'<tspan class="v-{band_class(last, target, limit)}">{fmt_ms(last)}</tspan></text>'
        )
        body.append(
            f'<text class="tick" x="{num(ox)}" y="{num(oy + panel_h - 4)}">'
            f"{_clock(t0, dt)}</text>"
            f'<text class="tick" x="{num(ox + panel_w)}" y="{num(oy + panel_h - 4)}" '
            f'text-anchor="end">{_clock(t1, dt)}</text>'
        )
        body.append("</g>")
    label = "Per-stage p95 over time against each stage's limit: " + "; ".join(
        f"{name} latest {fmt_ms(next((v for v in reversed(vs) if v is not None), None))} ms"
        for name, _, _, _, vs in series
    )
    return svg_root(width, rows * (panel_h + gap), label, body, "panels")


def _clock(t: float, span: float) -> str:
    """The time of day, to the second when the chart spans less than an hour."""
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S" if span < 3600 else "%H:%M")


# -- trace list: one stacked bar a row ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StackPart:
    name: str
    colour: int
    ms: float


def stage_stack(
    parts: Sequence[StackPart],
    *,
    limit_ms: float,
    target_ms: float,
    width: float = 180,
    height: float = 14,
) -> Markup:
    """Stage times stacked left to right against the total limit (the red tick)."""
    total = sum(p.ms for p in parts)
    top = max(limit_ms * 1.2, total, 1.0)
    scale = (width - 2) / top
    body: list[str] = []
    x = 1.0
    for part in parts:
        w = part.ms * scale
        if w > 0:
            body.append(
                f'<rect class="{stage_class(part.colour)}" x="{num(x)}" y="2" width="{num(w)}" '
                f'height="{num(height - 4)}"><title>{esc(part.name)} {fmt_ms(part.ms)} ms</title>'
                "</rect>"
            )
        x += w
    for ms, cls in ((target_ms, "target"), (limit_ms, "limit")):
        body.append(
            f'<line class="mark {cls}" x1="{num(1 + ms * scale)}" x2="{num(1 + ms * scale)}" '
            f'y1="0" y2="{num(height)}"/>'
        )
    label = ", ".join(f"{p.name} {fmt_ms(p.ms)} ms" for p in parts) + (
        f"; total limit {fmt_ms(limit_ms)} ms"
    )
    return svg_root(width, height, label, body, "stack")


# -- trace page: allocated against actual ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetRow:
    name: str
    colour: int
    ms: float | None
    target_ms: float
    limit_ms: float
    status: str


def budget_bars(
    rows: Sequence[BudgetRow],
    *,
    ttft_ms: float | None,
    total_target_ms: float,
    total_limit_ms: float,
    unattributed_ms: float,
    width: float = 720,
) -> Markup:
    """Stacked: targets, limits, and the actual stage times (plus unattributed) against the
    total limit; then stage by stage, each stage's allocation (outline, target tick) with
    its actual time filled, on one scale."""
    label_w, value_w = 92.0, 150.0
    plot_w = width - label_w - value_w
    actual_total = sum(r.ms or 0.0 for r in rows) + unattributed_ms
    top = max(total_limit_ms * 1.1, actual_total, sum(r.limit_ms for r in rows), 1.0)
    scale = plot_w / top
    body: list[str] = []
    y = 4.0
    stacks = (
        ("target", [(r, r.target_ms) for r in rows], None),
        ("limit", [(r, r.limit_ms) for r in rows], None),
        ("actual", [(r, r.ms or 0.0) for r in rows], unattributed_ms),
    )
    for title, values, rest in stacks:
        x = label_w
        body.append(f'<g class="stack-row" data-row="{title}">')
        body.append(f'<text class="label" x="0" y="{num(y + 13)}">{title}</text>')
        for row, ms in values:
            w = ms * scale
            cls = stage_class(row.colour) + (" alloc" if title != "actual" else "")
            body.append(
                f'<rect class="{cls}" x="{num(x)}" y="{num(y)}" width="{num(w)}" height="18" '
                f'data-stage="{esc(row.name)}" data-ms="{num(ms)}"><title>{esc(row.name)} {title} '
                f"{fmt_ms(ms)} ms</title></rect>"
            )
            x += w
        if rest:
            body.append(
                f'<rect class="unattributed" x="{num(x)}" y="{num(y)}" width="{num(rest * scale)}" '
                f'height="18"><title>unattributed {fmt_ms(rest)} ms</title></rect>'
            )
        total = ttft_ms if title == "actual" else sum(ms for _, ms in values)
        body.append(
            f'<text class="value" x="{num(width - value_w + 8)}" y="{num(y + 13)}">'
            f"{fmt_ms(total)} ms</text></g>"
        )
        y += 24
    for ms, cls in ((total_target_ms, "target"), (total_limit_ms, "limit")):
        body.append(
            f'<line class="mark {cls}" x1="{num(label_w + ms * scale)}" '
            f'x2="{num(label_w + ms * scale)}" y1="0" y2="{num(y)}"/>'
            f'<text class="tick" x="{num(label_w + ms * scale + 3)}" y="{num(y + 8)}">total {cls} '
            f"{fmt_ms(ms)}</text>"
        )
    y += 20
    stage_top = max([max(r.limit_ms, r.ms or 0.0) for r in rows] + [1.0]) * 1.08
    stage_scale = plot_w / stage_top
    for row in rows:
        body.append(f'<g class="stage-row" data-stage="{esc(row.name)}">')
        body.append(f'<text class="label" x="0" y="{num(y + 12)}">{esc(row.name)}</text>')
        body.append(
            f'<rect class="alloc-frame" x="{num(label_w)}" y="{num(y)}" '
            f'width="{num(row.limit_ms * stage_scale)}" height="16"/>'
            f'<line class="mark target" x1="{num(label_w + row.target_ms * stage_scale)}" '
            f'x2="{num(label_w + row.target_ms * stage_scale)}" y1="{num(y - 2)}" '
            f'y2="{num(y + 18)}"/>'
        )
        if row.ms is not None:
            body.append(
                f'<rect class="{stage_class(row.colour)} actual st-{esc(row.status)}" '
                f'x="{num(label_w)}" y="{num(y + 3)}" width="{num(row.ms * stage_scale)}" '
                f'height="10" data-ms="{num(row.ms)}"/>'
            )
        text = (
            "unmeasured"
            if row.ms is None
            else f"{fmt_ms(row.ms)} / {fmt_ms(row.limit_ms)} ms · {row.status}"
        )
        body.append(
            f'<text class="value v-{esc(row.status)}" x="{num(width - value_w + 8)}" '
            f'y="{num(y + 12)}">{esc(text)}</text></g>'
        )
        y += 24
    label = "Budget: allocated against actual. " + "; ".join(
        f"{r.name} {fmt_ms(r.ms)} of {fmt_ms(r.limit_ms)} ms ({r.status})" for r in rows
    )
    return svg_root(width, y + 4, label, body, "budget")


# -- overview: where the budget goes (share of TTFT and of the blame) ----------------------


@dataclass(frozen=True, slots=True)
class ShareRow:
    """A stage's share of the time to first token and of the overruns' blame, with the
    blame share's interval; colour -1 for time no stage holds (unattributed)."""

    name: str
    colour: int
    time_share: float | None
    blame_share: float | None
    blame_low: float
    blame_high: float


def _share_class(colour: int) -> str:
    return "nostage" if colour < 0 else stage_class(colour)


def _pct(share: float | None) -> str:
    return "–" if share is None else f"{share * 100:.0f} %"


def share_bars(
    rows: Sequence[ShareRow], *, traces: int, overruns: int, width: float = 760
) -> Markup:
    """One line per stage: a bar of its share of the summed TTFT (in its colour), and a bar
    of its share of the overruns' blame (red) with its interval as a whisker; 0–100 %."""
    label_w, gap, value_w, row_h, head = 100.0, 24.0, 96.0, 24.0, 20.0
    half = (width - label_w - gap) / 2
    plot_w = half - value_w
    left = (label_w, label_w + half + gap)
    body = [
        f'<text class="tick" x="{num(left[0])}" y="12">share of TTFT ({traces} traces)</text>',
        f'<text class="tick" x="{num(left[1])}" y="12">share of the blame ({overruns} '
        f"{'overrun' if overruns == 1 else 'overruns'})</text>",
    ]
    for i, row in enumerate(rows):
        y = head + i * row_h
        body.append(f'<g class="share-row" data-stage="{esc(row.name)}">')
        body.append(f'<text class="label" x="0" y="{num(y + 13)}">{esc(row.name)}</text>')
        for x0 in left:
            body.append(
                f'<rect class="frame" x="{num(x0)}" y="{num(y + 2)}" width="{num(plot_w)}" '
                'height="14"/>'
            )
        if row.time_share is not None:
            body.append(
                f'<rect class="{_share_class(row.colour)} time-share" x="{num(left[0])}" '
                f'y="{num(y + 2)}" width="{num(row.time_share * plot_w)}" height="14" '
                f'data-share="{row.time_share:.4f}"/>'
            )
        body.append(
            f'<text class="value" x="{num(left[0] + plot_w + 6)}" y="{num(y + 13)}">'
            f"{_pct(row.time_share)}</text>"
        )
        if row.blame_share is not None:
            mid = y + 9
            body.append(
                f'<rect class="bar over blame-share" x="{num(left[1])}" y="{num(y + 2)}" '
                f'width="{num(row.blame_share * plot_w)}" height="14" '
                f'data-share="{row.blame_share:.4f}"/>'
                f'<line class="whisker" x1="{num(left[1] + row.blame_low * plot_w)}" '
                f'x2="{num(left[1] + row.blame_high * plot_w)}" y1="{num(mid)}" y2="{num(mid)}"/>'
            )
            text = f"{_pct(row.blame_share)} ({row.blame_low * 100:.0f}–{row.blame_high * 100:.0f})"
        else:
            text = "no overrun"
        body.append(
            f'<text class="value" x="{num(left[1] + plot_w + 6)}" y="{num(y + 13)}">'
            f"{esc(text)}</text></g>"
        )
    label = "Each stage's share of the time to first token and of the overruns' blame: " + (
        "; ".join(
            f"{r.name} {_pct(r.time_share)} of TTFT, {_pct(r.blame_share)} of the blame"
            for r in rows
        )
    )
    return svg_root(width, head + len(rows) * row_h + 4, label, body, "shares")


def share_panels(
    starts: Sequence[float],
    end: float,
    series: Sequence[tuple[str, int, Sequence[float | None], Sequence[float | None]]],
    *,
    width: float = 640,
) -> Markup:
    """Small multiples, one per stage: its share of the TTFT (solid, its colour) and of the
    blame (dashed, red) per time slice, on 0–100 %. `series`: (name, colour index, time
    shares, blame shares), one value a slice, None where the slice has no trace or overrun."""
    cols = 3 if len(series) > 4 else max(1, len(series))
    panel_w, panel_h, gap = (width - (cols - 1) * 12) / cols, 96.0, 12.0
    rows = math.ceil(len(series) / cols)
    body: list[str] = []
    t0, t1 = (starts[0] if starts else 0.0), end
    dt = (t1 - t0) or 1.0
    slot = dt / max(1, len(starts))
    for i, (name, colour, times, blames) in enumerate(series):
        ox = (i % cols) * (panel_w + gap)
        oy = (i // cols) * (panel_h + gap)
        plot_top, plot_h = oy + 16, panel_h - 34

        def y(share: float, plot_top: float = plot_top, plot_h: float = plot_h) -> float:
            return plot_top + plot_h - min(max(share, 0.0), 1.0) * plot_h

        def x(t: float, ox: float = ox) -> float:
            return ox + (t - t0) / dt * panel_w

        body.append(f'<g class="panel" data-stage="{esc(name)}">')
        body.append(
            f'<rect class="frame" x="{num(ox)}" y="{num(plot_top)}" width="{num(panel_w)}" '
            f'height="{num(plot_h)}"/>'
            f'<text class="label" x="{num(ox)}" y="{num(oy + 11)}">{esc(name)}</text>'
            f'<line class="grid" x1="{num(ox)}" x2="{num(ox + panel_w)}" y1="{num(y(0.5))}" '
            f'y2="{num(y(0.5))}"/>'
        )
        for values, cls in ((times, f"line {_share_class(colour)}"), (blames, "line blame")):
            for seg in _segments([start + slot / 2 for start in starts], values, x, y):
                if " " not in seg:  # one slice alone: a dot, not an invisible line
                    cx, cy = seg.split(",")
                    dot = cls.replace("line ", "dot ")
                    body.append(f'<circle class="{dot}" cx="{cx}" cy="{cy}" r="2"/>')
                else:
                    body.append(f'<polyline class="{cls}" points="{seg}"/>')
        last_time = next((v for v in reversed(times) if v is not None), None)
        last_blame = next((v for v in reversed(blames) if v is not None), None)
        body.append(
            f'<text class="tick" x="{num(ox + panel_w)}" y="{num(oy + 11)}" text-anchor="end">'
            f"last {_pct(last_time)} · blame {_pct(last_blame)}</text>"
        )
        body.append(
            f'<text class="tick" x="{num(ox)}" y="{num(oy + panel_h - 4)}">'
            f"{_clock(t0, dt)}</text>"
            f'<text class="tick" x="{num(ox + panel_w)}" y="{num(oy + panel_h - 4)}" '
            f'text-anchor="end">{_clock(t1, dt)}</text>'
        )
        body.append("</g>")
    label = "Each stage's share of the TTFT and of the blame over time: " + "; ".join(
        f"{name} latest {_pct(next((v for v in reversed(ts) if v is not None), None))} of TTFT"
        for name, _, ts, _ in series
    )
    return svg_root(width, rows * (panel_h + gap), label, body, "panels share-panels")
