"""A trace's waterfall: its spans laid out in time, re-judged by the pure evaluator.

`build_waterfall` takes a trace's spans and the evaluator of the current budget and
returns rows (one a span, vLLM's phases as the evaluator expands them included) with each
one's stage, its time on the critical path as segments, and any clock-skew shift.
Nothing derived is stored: judging a trace again takes about 100 µs. `render_waterfall`
draws it as SVG, the first-token line and the time after it (outside the TTFT window)
greyed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup

from spanbudget.collector.judging.attribution import Node, assemble
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.live.ui.charts import esc, fmt_ms, nice_ticks, num, stage_class, svg_root
from spanbudget.collector.spans import Span

__all__ = ["Waterfall", "WaterfallRow", "build_waterfall", "render_waterfall"]

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


@dataclass(frozen=True, slots=True)
class Waterfall:
    rows: tuple[WaterfallRow, ...]
    duration_ms: float  # the root span, start to end
    first_token_ms: float | None
    verdict: Verdict  # as the current budget judges the kept spans now


def build_waterfall(spans: Sequence[Span], evaluator: Evaluator) -> Waterfall | None:
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
        colours = {name: i for i, name in enumerate(evaluator.budget.stage_names())}
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


def render_waterfall(view: Waterfall, *, width: float = 1040) -> Markup:
    """The spans as bars on one time scale; critical-path segments drawn on top (`.cp`);
    the first-token line (`#first-token`); the time after it greyed; shifted spans marked.

    The scale is on the element for checks and scripts: x = data-x0 + ms × data-px-per-ms.
    """
    label_w, row_h, axis_h = 300.0, 20.0, 22.0
    plot_w = width - label_w - 70
    duration = max(view.duration_ms, view.first_token_ms or 0.0, 0.001)
    scale = plot_w / duration
    height = axis_h + len(view.rows) * row_h + 8

    def x(ms: float) -> float:
        return label_w + ms * scale

    body: list[str] = []
    for ms in nice_ticks(0.0, duration, 8):
        body.append(
            f'<line class="grid" x1="{num(x(ms))}" x2="{num(x(ms))}" y1="{num(axis_h - 4)}" '
            f'y2="{num(height)}"/><text class="tick" x="{num(x(ms))}" y="12" '
            f'text-anchor="middle">{fmt_ms(ms)}</text>'
        )
    ft = view.first_token_ms
    if ft is not None and ft < duration:
        body.append(
            f'<rect class="after-ft" x="{num(x(ft))}" y="{num(axis_h - 4)}" '
            f'width="{num(x(duration) - x(ft))}" height="{num(height - axis_h + 4)}">'
            "<title>after the first token: outside the TTFT window</title></rect>"
        )
    for i, row in enumerate(view.rows):
        y = axis_h + i * row_h
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
        body.append(
            f'<g class="{" ".join(classes)}" tabindex="0" aria-label="{esc(tip)}" '
            f'data-span-id="{esc(row.span_id)}" data-stage="{esc(row.stage or "")}">'
            f"<title>{esc(tip)}</title>"
        )
        name = row.name if len(row.name) <= 34 else row.name[:33] + "…"
        body.append(
            f'<text class="label" x="{num(4 + row.depth * 12)}" y="{num(y + 14)}">'
            f"{esc(name)}</text>"
        )
        body.append(
            f'<rect class="bar {stage_cls}" x="{num(x(row.start_ms))}" y="{num(y + 5)}" '
            f'width="{num(max(1.0, dur * scale))}" height="10" '
            f'data-start-ms="{num(row.start_ms)}" data-end-ms="{num(row.end_ms)}"/>'
        )
        if ft is not None and row.end_ms > ft:
            lo = max(row.start_ms, ft)
            body.append(
                f'<rect class="grey" x="{num(x(lo))}" y="{num(y + 5)}" '
                f'width="{num((row.end_ms - lo) * scale)}" height="10"/>'
            )
        for start, end in row.segments:
            body.append(
                f'<rect class="cp {stage_cls}" x="{num(x(start))}" y="{num(y + 2)}" '
                f'width="{num((end - start) * scale)}" height="16" '
                f'data-start-ms="{num(start)}" data-end-ms="{num(end)}"/>'
            )
        if row.shift_ms:
            ghost = row.start_ms - row.shift_ms
            right = x(max(row.end_ms, ghost + dur)) + 4
            left = x(min(row.start_ms, ghost)) - 4
            at, anchor = (right, "start") if right + 64 <= width else (left, "end")
            body.append(
                f'<rect class="ghost" x="{num(x(ghost))}" y="{num(y + 5)}" '
                f'width="{num(max(1.0, dur * scale))}" height="10"/>'
                f'<text class="skew" x="{num(at)}" y="{num(y + 14)}" text-anchor="{anchor}" '
                f'data-shift-ms="{num(row.shift_ms)}">⇄ {row.shift_ms:+.1f} ms</text>'
            )
        body.append("</g>")
    if ft is not None:
        body.append(
            f'<line id="first-token" class="first-token" x1="{num(x(ft))}" x2="{num(x(ft))}" '
            f'y1="{num(axis_h - 6)}" y2="{num(height)}" data-ms="{num(ft)}"/>'
            f'<text class="ft-label" x="{num(x(ft) + 4)}" y="{num(axis_h + 2)}">first token '
            f"{fmt_ms(ft)} ms</text>"
        )
    label = (
        f"Waterfall of {len(view.rows)} spans over {fmt_ms(view.duration_ms)} ms; first token at "
        f"{fmt_ms(ft)} ms; critical-path segments highlighted"
    )
    return svg_root(
        width,
        height,
        label,
        body,
        "waterfall",
        x0=num(label_w),
        px_per_ms=repr(scale),
    )
