"""`compare --html`: one self-contained page, the table of `render_terminal` and, per
stage, the two sides' distributions drawn on one scale with the web UI's histogram and
stylesheet. `stage_figures` draws the pairs for the web UI's compare view too."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from ..charts import bin_counts, fmt_ms, histogram, round_edges
from ..check.render import short_ids
from ..stats import percentile
from .comparison import Comparison
from .rules import Finding
from .samples import Limits

__all__ = ["StageFigure", "environment", "render_body", "render_html", "stage_figures"]

BINS = 30
SLOWEST = 5  # traces linked per stage and side


@dataclass(frozen=True, slots=True)
class StageFigure:
    name: str
    base_svg: Markup
    candidate_svg: Markup


def _pair(
    comparison: Comparison, name: str, width: float
) -> tuple[Sequence[float], Markup, Markup]:
    a = sorted(comparison.base.values(name)[0])
    b = sorted(comparison.candidate.values(name)[0])
    known = comparison.base.limits.get(name) or comparison.candidate.limits.get(name)
    tail = max(percentile(a, 99), percentile(b, 99)) * 1.1
    edges = round_edges(max(tail, known.limit_ms * 1.4 if known else 0.0, 1.0), BINS)
    limits = known or Limits(edges[-1], edges[-1])  # no budget known: marks at the edge
    svgs = [
        histogram(
            edges,
            bin_counts(values, edges),
            target_ms=limits.target_ms,
            limit_ms=limits.limit_ms,
            width=width,
            height=170,
            what=f"{name} ({side.label})",
            noun="requests",
        )
        for values, side in ((a, comparison.base), (b, comparison.candidate))
    ]
    return edges, svgs[0], svgs[1]


def stage_figures(comparison: Comparison, *, width: float = 420) -> list[StageFigure]:
    """Per measured stage, both sides' histograms over the same bins."""
    figures = []
    for stage in comparison.stages:
        if stage.stats:
            _, base_svg, candidate_svg = _pair(comparison, stage.name, width)
            figures.append(StageFigure(stage.name, base_svg, candidate_svg))
    return figures


def environment(package: str = "spanbudget.collector.compare") -> Environment:
    env = Environment(
        loader=PackageLoader(package, "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms"] = fmt_ms
    return env


def _stylesheet() -> Markup:
    text = resources.files("spanbudget.collector.charts").joinpath("charts.css")
    return Markup(text.read_text(encoding="utf-8"))


def _render(
    template: str, comparison: Comparison, findings: Sequence[Finding], **context: object
) -> str:
    """`template` over the comparison, its per-stage figures and the rules' findings."""
    return (
        environment()
        .get_template(template)
        .render(
            c=comparison,
            figures=stage_figures(comparison),
            findings=list(findings),
            **context,
        )
    )


def render_html(comparison: Comparison, findings: Sequence[Finding] = ()) -> str:
    """The whole page, its stylesheet inlined: one file to keep beside a run."""
    return _render(
        "compare.html", comparison, findings, stylesheet=_stylesheet(), links=None, short={}
    )


def _short_ids(comparison: Comparison) -> dict[str, str]:
    """What the page shows of each linked trace id: the shortest part that keeps them apart."""
    ids = [
        trace_id
        for stage in comparison.stages
        if stage.stats
        for side in (comparison.base, comparison.candidate)
        for trace_id, _ in side.slowest(stage.name, SLOWEST)
    ]
    return short_ids(ids, 0)


def render_body(
    comparison: Comparison, findings: Sequence[Finding] = (), *, trace_url: str = ""
) -> Markup:
    """The comparison without its page, for the web UI's compare view; with `trace_url`
    (`/traces/`), each stage lists each side's slowest traces, linked there."""
    html = _render(
        "body.html",
        comparison,
        findings,
        links=trace_url or None,
        short=_short_ids(comparison),
    )
    return Markup(html)
