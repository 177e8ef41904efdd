"""A trace's waterfall: its spans laid out in time, re-judged by the pure evaluator.

`build_waterfall` takes a trace's spans and the evaluator of the current budget and
returns rows (one a span, vLLM's phases as the evaluator expands them included) with each
one's stage, its time on the critical path as segments, any clock-skew shift, and its
attributes. Nothing derived is stored: judging a trace again takes about 100 µs.

`render_waterfall` draws it as HTML rows (bars placed in percent of the time window, so
the timeline takes whatever width the screen has and the text keeps its size): by default
the TTFT window, `[0, first token]`, fills the width; `window_of` reads the page's `view`
query parameter (`ttft`, `whole`, or a range in ms such as `12.5-40`), and a minimap of the
whole trace with zoom links moves the window without any script. Each row is a
`<details>`: opened, it lists the span's attributes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup

from ..charts import esc, fmt_ms, nice_ticks, stage_class
from ..judging.attribution import Node, assemble
from ..judging.evaluate import Judge
from ..judging.verdict import Verdict
from ..spans import AttrValue, Span

__all__ = [
    "Waterfall",
    "WaterfallRow",
    "Window",
    "build_waterfall",
    "render_waterfall",
    "window_of",
]

_NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class WaterfallRow:
    """One span (or vLLM phase), times in ms from the trace's start, after skew adjustment."""

    span_id: str
    name: str
    service: str
    kind: str
    depth: int
    start_ms: float
    end_ms: float
    stage: str | None
    colour: int | None  # the stage's index in the budget, for its colour
    on_path: bool
    segments: tuple[tuple[float, float], ...]  # its exclusive time on the critical path
    self_ms: float  # the evaluator's exclusive time (equals the segments' sum)
    virtual: bool
    shift_ms: float  # clock-skew shift applied here (its subtree moved with it), 0 when none
    error: bool
    attributes: tuple[tuple[str, str], ...] = ()  # the span's own, sorted, values as text


@dataclass(frozen=True, slots=True)
class Waterfall:
    rows: tuple[WaterfallRow, ...]
    duration_ms: float  # the root span, start to end
    first_token_ms: float | None
    verdict: Verdict  # as the current budget judges the kept spans now


def build_waterfall(spans: Sequence[Span], evaluator: Judge) -> Waterfall | None:
    """Rows in tree order (children by start), or None when the budget does not judge it."""
    layout = assemble(spans)
    judged = evaluator.judge(spans, evaluated_at=datetime.now(UTC), keep_tree=True)
    if layout is None or judged is None or judged.tree is None:
        if layout is not None:
            layout.release()
        return None
    tree = judged.tree
    try:
        t0 = layout.root.start
        original = {span.span_id: span.start_ns for span in spans}
        attributed = {node.span_id: node for node in tree.nodes}
        # The stages of the budget that judged it (a preset's, when recognised), in order.
        colours = {stage.name: i for i, stage in enumerate(judged.verdict.stages)}
        rows: list[WaterfallRow] = []
        # A shifted span moves its subtree with it: mark the span the shift was applied to.
        offsets: dict[str, int] = {}
        stack = [layout.root]
        while stack:
            node = stack.pop()
            stack.extend(sorted(node.children, key=lambda n: (n.start, n.span_id), reverse=True))
            twin = attributed.get(node.span_id)
            stage = twin.stage if twin is not None else None
            on_path = twin is not None and twin.on_path
            parent_offset = offsets.get(node.parent.span_id, 0) if node.parent else 0
            offset = (
                parent_offset
                if node.virtual
                else node.start - original.get(node.span_id, node.start)
            )
            offsets[node.span_id] = offset
            shift = offset - parent_offset
            rows.append(
                WaterfallRow(
                    span_id=node.span_id,
                    name=node.name,
                    service=node.service,
                    kind=node.kind.value,
                    depth=node.depth,
                    start_ms=(node.start - t0) / _NS_PER_MS,
                    end_ms=(node.end - t0) / _NS_PER_MS,
                    stage=stage,
                    colour=colours.get(stage) if stage is not None else None,
                    on_path=on_path,
                    segments=_segments(twin, t0) if twin is not None and on_path else (),
                    self_ms=(twin.self_ns / _NS_PER_MS) if twin is not None else 0.0,
                    virtual=node.virtual,
                    shift_ms=shift / _NS_PER_MS,
                    error=node.error,
                    attributes=_attribute_text(node.attributes),
                )
            )
        first = judged.first_token_ns
        return Waterfall(
            rows=tuple(rows),
            duration_ms=(layout.root.end - t0) / _NS_PER_MS,
            first_token_ms=None if first is None else (first - t0) / _NS_PER_MS,
            verdict=judged.verdict,
        )
    finally:
        layout.release()
        tree.release()


def _segments(node: Node, t0: int) -> tuple[tuple[float, float], ...]:
    """The node's clipped interval less the intervals of the children the walk entered.

    The critical-path walk enters a child at the child's end and leaves it at its start,
    so what is left of the parent between them is the parent's own time on the path.
    """
    taken = sorted((kid.start, kid.end) for kid in node.children if kid.on_path)
    out: list[tuple[float, float]] = []
    cursor = node.start
    for start, end in taken:
        if start > cursor:
            out.append((cursor, start))
        cursor = max(cursor, end)
    if node.end > cursor:
        out.append((cursor, node.end))
    return tuple(((a - t0) / _NS_PER_MS, (b - t0) / _NS_PER_MS) for a, b in out)


def _attribute_text(attributes: Mapping[str, AttrValue]) -> tuple[tuple[str, str], ...]:
    def text(value: AttrValue) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return repr(value)
        return "[" + ", ".join(text(v) for v in value) + "]"

    return tuple((key, text(attributes[key])) for key in sorted(attributes))


# -- the window shown ------------------------------------------------------------------------

VIEW_TTFT = "ttft"
VIEW_WHOLE = "whole"
_RANGE = re.compile(r"(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)\Z")
_MIN_WINDOW_MS = 0.05  # narrower than this, bars are wider than the window's precision
_FT_MARGIN = 0.04  # the TTFT view runs this share past the first token, to show the line


@dataclass(frozen=True, slots=True)
class Window:
    """The time range drawn, in ms from the trace's start; `name` is `ttft`, `whole`, or
    `range` (a zoom)."""

    lo_ms: float
    hi_ms: float
    name: str

    @property
    def span_ms(self) -> float:
        return self.hi_ms - self.lo_ms

    def pct(self, ms: float) -> float:
        """Where `ms` falls, in percent of the window's width (outside: below 0 or over 100)."""
        return (ms - self.lo_ms) / self.span_ms * 100.0


def _whole(view: Waterfall) -> Window:
    return Window(0.0, max(view.duration_ms, view.first_token_ms or 0.0, 0.001), VIEW_WHOLE)


def window_of(view: Waterfall, text: str | None = None) -> Window:
    """The window a `view` query parameter asks for; the TTFT window by default, and also
    for anything it cannot read (a stale or mistyped link still shows the trace)."""
    whole = _whole(view)
    text = (text or "").strip()
    if text == VIEW_WHOLE:
        return whole
    wanted = _RANGE.match(text)
    if wanted:
        lo = min(max(float(wanted[1]), 0.0), whole.hi_ms)
        hi = min(max(float(wanted[2]), 0.0), whole.hi_ms)
        if hi - lo >= _MIN_WINDOW_MS:
            return Window(lo, hi, "range")
    ft = view.first_token_ms
    if ft is None or ft <= 0:
        return whole
    return Window(0.0, ft * (1 + _FT_MARGIN), VIEW_TTFT)


def _ms_text(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"


def _href(lo: float, hi: float) -> str:
    return f"?view={_ms_text(lo)}-{_ms_text(hi)}#waterfall"


def _zoomed(whole: Window, centre: float, width: float) -> str:
    """A link to `width` ms around `centre`, slid to stay inside the trace."""
    if width >= whole.span_ms:
        return f"?view={VIEW_WHOLE}#waterfall"
    lo = min(max(centre - width / 2, 0.0), whole.hi_ms - width)
    return _href(lo, lo + width)


def _stage_runs(view: Waterfall) -> list[tuple[str, int, float, float]]:
    """Each stage's stretches on the critical path (its segments merged where they touch),
    in time order, as (stage, colour, start, end): a stage such as the gateway's owns a
    stretch before the work it calls and another on the way back, and zooming to both at
    once would show the whole window again."""
    pieces = sorted(
        (start, end, row.stage, row.colour)
        for row in view.rows
        if row.stage is not None and row.colour is not None
        for start, end in row.segments
    )
    runs: list[list[float]] = []
    keys: list[tuple[str, int]] = []
    last: dict[str, int] = {}
    for start, end, stage, colour in pieces:
        i = last.get(stage)
        if i is not None and start <= runs[i][1] + 1e-6:
            runs[i][1] = max(runs[i][1], end)
            continue
        last[stage] = len(runs)
        runs.append([start, end])
        keys.append((stage, colour))
    return [(k[0], k[1], r[0], r[1]) for k, r in zip(keys, runs, strict=True)]


# -- drawing ---------------------------------------------------------------------------------


def _p(value: float) -> str:
    """A percentage for a style: three decimals (a thousandth of a percent of 1,000 px is
    a hundredth of a pixel)."""
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"


def _place(window: Window, start: float, end: float) -> tuple[float, float] | None:
    """Left and width in percent of `[start, end]` clipped to the window; None outside it."""
    lo, hi = max(start, window.lo_ms), min(end, window.hi_ms)
    if hi < lo or (hi == lo and not start <= window.lo_ms <= end):
        return None
    return window.pct(lo), window.pct(hi) - window.pct(lo)


def _box(cls: str, window: Window, start: float, end: float, extra: str = "") -> str:
    placed = _place(window, start, end)
    if placed is None:
        return ""
    left, width = placed
    return (
        f'<span class="{cls}" style="left:{_p(left)}%;width:{_p(width)}%"'
        f' data-start-ms="{_ms_text(start)}" data-end-ms="{_ms_text(end)}"{extra}></span>'
    )


def _toolbar(view: Waterfall, window: Window) -> str:
    whole = _whole(view)
    ft = view.first_token_ms
    here = ' aria-current="true"'
    links = []
    if ft is not None and ft > 0:
        links.append(
            f'<a id="view-ttft" href="?view={VIEW_TTFT}#waterfall"'
            f"{here if window.name == VIEW_TTFT else ''}>TTFT window (0–{fmt_ms(ft)} ms)</a>"
        )
    links.append(
        f'<a id="view-whole" href="?view={VIEW_WHOLE}#waterfall"'
        f"{here if window.name == VIEW_WHOLE else ''}>whole trace "
        f"(0–{fmt_ms(whole.hi_ms)} ms)</a>"
    )
    centre = (window.lo_ms + window.hi_ms) / 2
    if window.span_ms / 2 >= _MIN_WINDOW_MS:
        links.append(
            f'<a id="zoom-in" href="{esc(_zoomed(whole, centre, window.span_ms / 2))}">'
            "zoom in ×2</a>"
        )
    if window.name != VIEW_WHOLE:
        links.append(
            f'<a id="zoom-out" href="{esc(_zoomed(whole, centre, window.span_ms * 2))}">'
            "zoom out ×2</a>"
        )
    first: dict[str, tuple[int, float, float]] = {}
    for name, colour, lo, hi in _stage_runs(view):
        first.setdefault(name, (colour, lo, hi))
    stages = [
        f'<a class="zoom-stage" data-stage="{esc(name)}" href="{esc(_stage_href(lo, hi))}">'
        f'<span class="key {stage_class(colour)}"></span>{esc(name)}</a>'
        for name, (colour, lo, hi) in first.items()
    ]
    zoom = " · ".join(links)
    if stages:
        zoom += ' <span class="wf-stages">· zoom to a stage: ' + " ".join(stages) + "</span>"
    shown = (
        f"showing {fmt_ms(window.lo_ms)}–{fmt_ms(min(window.hi_ms, whole.hi_ms))} ms "
        f"of {fmt_ms(whole.hi_ms)}"
    )
    return f'<p class="wf-toolbar">{zoom} <span class="muted" id="wf-shown">({shown})</span></p>'


def _stage_href(lo: float, hi: float) -> str:
    """A zoom on `[lo, hi]` with a margin each side, so its edges stay visible."""
    pad = max((hi - lo) * 0.15, (_MIN_WINDOW_MS * 1.2 - (hi - lo)) / 2)
    return _href(max(lo - pad, 0.0), hi + pad)


def _minimap(view: Waterfall, window: Window) -> str:
    """The whole trace's critical path in one strip, coloured by stage, with the window
    outlined; a stage's pieces link to a zoom on it (no script needed; with the page's
    script, dragging across the strip zooms to that range)."""
    whole = _whole(view)
    k = 1000.0 / whole.span_ms  # the strip is 1,000 user units wide, stretched to fit
    body = ['<rect class="mm-bg" x="0" y="0" width="1000" height="24"/>']
    for row in view.rows:  # time of no stage on the path: drawn, links nowhere
        if row.stage is None or row.colour is None:
            body.extend(
                f'<rect class="nostage" x="{start * k:.2f}" y="5" '
                f'width="{max((end - start) * k, 0.5):.2f}" height="14"/>'
                for start, end in row.segments
            )
    for stage, colour, lo, hi in _stage_runs(view):
        body.append(
            f'<a href="{esc(_stage_href(lo, hi))}" aria-label="zoom to {esc(stage)}, '
            f'{fmt_ms(lo)}–{fmt_ms(hi)} ms"><title>{esc(stage)} {fmt_ms(lo)}–{fmt_ms(hi)} ms: '
            f'zoom to it</title><rect class="{stage_class(colour)}" x="{lo * k:.2f}" y="5" '
            f'width="{max((hi - lo) * k, 0.5):.2f}" height="14"/></a>'
        )
    ft = view.first_token_ms
    if ft is not None:
        body.append(f'<line class="mm-ft" x1="{ft * k:.2f}" x2="{ft * k:.2f}" y1="0" y2="24"/>')
    lo, hi = window.lo_ms * k, min(window.hi_ms, whole.hi_ms) * k
    body.append(
        f'<rect class="mm-dim" x="0" y="0" width="{lo:.2f}" height="24"/>'
        f'<rect class="mm-dim" x="{hi:.2f}" y="0" width="{max(1000 - hi, 0):.2f}" height="24"/>'
        f'<rect class="mm-window" x="{lo:.2f}" y="0.5" width="{max(hi - lo, 1):.2f}" '
        'height="23"/>'
    )
    return (
        f'<svg class="wf-minimap" id="wf-minimap" viewBox="0 0 1000 24" '
        f'preserveAspectRatio="none" data-duration-ms="{_ms_text(whole.hi_ms)}" '
        f'aria-label="The whole trace, {fmt_ms(whole.hi_ms)} ms: the critical path by stage, '
        f'the window shown outlined" xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>"
    )


def _axis(view: Waterfall, window: Window, ticks: list[float]) -> str:
    marks = []
    for i, ms in enumerate(ticks):
        edge = " end" if window.pct(ms) > 94 else " start" if window.pct(ms) < 6 else ""
        marks.append(
            f'<span class="tick{" odd" if i % 2 else ""}{edge}" '
            f'style="left:{_p(window.pct(ms))}%">{fmt_ms(ms)}</span>'
        )
    ft = view.first_token_ms
    if ft is not None and window.lo_ms <= ft <= window.hi_ms:
        side = " end" if window.pct(ft) > 70 else ""
        marks.append(
            f'<span id="first-token" class="first-token{side}" '
            f'style="left:{_p(window.pct(ft))}%" data-ms="{_ms_text(ft)}">'
            f"first token {fmt_ms(ft)} ms</span>"
        )
    return (
        '<div class="wf-axis" aria-hidden="true"><span class="wf-label">span · ms</span>'
        f'<span class="wf-track">{"".join(marks)}</span></div>'
    )


def _details(row: WaterfallRow) -> str:
    facts: list[tuple[str, str]] = [
        ("service", row.service),
        ("kind", row.kind),
        ("span id", row.span_id),
        ("stage", row.stage or "none"),
        (
            "time",
            f"{row.start_ms:.2f}–{row.end_ms:.2f} ms ({row.end_ms - row.start_ms:.2f} ms)",
        ),
    ]
    if row.on_path:
        facts.append(("on the critical path", f"{row.self_ms:.2f} ms"))
    if row.shift_ms:
        facts.append(("clock-skew shift", f"{row.shift_ms:+.2f} ms (its subtree moved too)"))
    if row.error:
        facts.append(("status", "error"))
    own = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in row.attributes)
    if row.virtual:
        own = (
            '<p class="muted">A phase of vLLM\'s <code>llm_request</code>, placed from its '
            "<code>gen_ai.latency.*</code> attributes.</p>"
        )
    elif not own:
        own = '<p class="muted">No attributes.</p>'
    else:
        own = f'<dl class="attrs">{own}</dl>'
    zoom = (
        f'<p class="wf-zoom-span"><a href="{esc(_stage_href(row.start_ms, row.end_ms))}">'
        "zoom to this span</a></p>"
    )
    return (
        '<div class="span-attrs"><dl class="facts">'
        + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts)
        + f"</dl>{own}{zoom}</div>"
    )


def _row(row: WaterfallRow, window: Window, ft: float | None, grid: str) -> str:
    stage_cls = stage_class(row.colour) if row.colour is not None else "nostage"
    classes = ["span-row", "on-path" if row.on_path else "off-path"]
    if row.virtual:
        classes.append("virtual")
    if row.error:
        classes.append("error")
    dur = row.end_ms - row.start_ms
    tip = (
        f"{row.name} ({row.service}, {row.kind}) · stage {row.stage or 'none'} · "
        f"{fmt_ms(row.start_ms)}–{fmt_ms(row.end_ms)} ms ({fmt_ms(dur)} ms)"
        + (f" · on the critical path {fmt_ms(row.self_ms)} ms" if row.on_path else "")
        + (f" · shifted {row.shift_ms:+.2f} ms for clock skew" if row.shift_ms else "")
        + (" · error" if row.error else "")
    )
    track = [grid]
    if ft is not None and ft < window.hi_ms:
        track.append(_box("after-ft", window, max(ft, window.lo_ms), window.hi_ms))
    bar = _box(f"bar {stage_cls}", window, row.start_ms, row.end_ms)
    if bar:
        track.append(bar)
    elif row.end_ms < window.lo_ms:
        track.append('<span class="off before" title="before the window">◂</span>')
    else:
        track.append('<span class="off after" title="after the window">▸</span>')
    if ft is not None and row.end_ms > ft:
        track.append(_box("grey", window, max(row.start_ms, ft), row.end_ms))
    for start, end in row.segments:
        track.append(_box(f"cp {stage_cls}", window, start, end))
    if row.shift_ms:
        ghost = row.start_ms - row.shift_ms
        track.append(_box("ghost", window, ghost, ghost + dur))
    if ft is not None and window.lo_ms <= ft <= window.hi_ms:
        track.append(f'<span class="ft" style="left:{_p(window.pct(ft))}%"></span>')
    skew = (
        f' <span class="skew" data-shift-ms="{_ms_text(row.shift_ms)}">'
        f"⇄ {row.shift_ms:+.1f} ms</span>"
        if row.shift_ms
        else ""
    )
    return (
        f'<details class="{" ".join(classes)}" data-span-id="{esc(row.span_id)}" '
        f'data-stage="{esc(row.stage or "")}" data-start-ms="{_ms_text(row.start_ms)}" '
        f'data-end-ms="{_ms_text(row.end_ms)}"><summary title="{esc(tip)}">'
        f'<span class="wf-label" style="--depth:{row.depth}">'
        f'<span class="wf-name">{esc(row.name)}</span> '
        f'<span class="wf-dur">{fmt_ms(dur)} ms</span>{skew}</span>'
        f'<span class="wf-track">{"".join(track)}</span></summary>{_details(row)}</details>'
    )


def render_waterfall(view: Waterfall, *, window: Window | None = None) -> Markup:
    """The zoom links and minimap, a time axis, then one `<details>` row a span: its bar
    (`.bar`), its critical-path segments on top (`.cp`), the first-token line (`.ft`, and
    `#first-token` on the axis) and the time after it greyed, clock-skew shifts marked.

    Bars are placed in percent of the window: left = (ms − data-lo-ms) / (data-hi-ms −
    data-lo-ms) × 100 %, on the container for checks and scripts.
    """
    window = window or window_of(view)
    ft = view.first_token_ms
    ticks = [
        t
        for t in nice_ticks(window.lo_ms, window.hi_ms, 8)
        if window.lo_ms <= t <= window.hi_ms + 1e-9
    ]
    grid = "".join(f'<span class="gl" style="left:{_p(window.pct(t))}%"></span>' for t in ticks)
    rows = "".join(_row(row, window, ft, grid) for row in view.rows)
    label = (
        f"Waterfall of {len(view.rows)} spans over {fmt_ms(view.duration_ms)} ms; first token "
        f"at {fmt_ms(ft)} ms; showing {fmt_ms(window.lo_ms)}–{fmt_ms(window.hi_ms)} ms"
    )
    return Markup(
        f'<div class="wf" id="waterfall" role="group" aria-label="{esc(label)}" '
        f'data-view="{window.name}" data-lo-ms="{_ms_text(window.lo_ms)}" '
        f'data-hi-ms="{_ms_text(window.hi_ms)}" data-duration-ms="{_ms_text(view.duration_ms)}"'
        + (f' data-first-token-ms="{_ms_text(ft)}"' if ft is not None else "")
        + ">"
        + _toolbar(view, window)
        + _minimap(view, window)
        + _axis(view, window, ticks)
        + f'<div class="wf-rows">{rows}</div></div>'
    )
