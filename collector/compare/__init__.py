"""`spanbudget compare`: two sides (runs, trace files, collector windows) read as per-request
samples (`samples`, `sources`), compared stage by stage with bootstrap intervals
(`bootstrap`, `comparison`), judged by `--fail-on` rules (`rules`), and shown as a table,
JSON or a page (`render_terminal`, `render_html`)."""

from .bootstrap import STATISTICS, Interval, bootstrap_differences
from .comparison import (
    Change,
    CompareSettings,
    Comparison,
    StageComparison,
    StatComparison,
    compare,
)
from .render_html import render_body, render_html, stage_figures
from .render_terminal import render_terminal
from .rules import Finding, Rule, RuleError, check_rules, parse_rule
from .samples import TTFT, Limits, Sample, Side

__all__ = [
    "STATISTICS",
    "TTFT",
    "Change",
    "CompareSettings",
    "Comparison",
    "Finding",
    "Interval",
    "Limits",
    "Rule",
    "RuleError",
    "Sample",
    "Side",
    "StageComparison",
    "StatComparison",
    "bootstrap_differences",
    "check_rules",
    "compare",
    "parse_rule",
    "render_body",
    "render_html",
    "render_terminal",
    "stage_figures",
]
