"""Metric names for the deployment tests: the exposed-name contract, PromQL name extraction.

The dashboard and the rule file may only query names that a real process exposes; this
module says which names those are: the DESIGN §7 contract, and a live scrape of running
processes to check the contract against.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "CONTRACT_COUNTERS",
    "CONTRACT_HISTOGRAMS",
    "PROMETHEUS_SYNTHETIC",
    "VLLM_HISTOGRAMS",
    "contract_sample_names",
    "promql_metric_names",
    "scrape_sample_names",
]

# DESIGN §7 "Metrics": the budget collector's families.
CONTRACT_HISTOGRAMS = ("spanbudget_stage_duration_seconds", "spanbudget_ttft_seconds")
CONTRACT_COUNTERS = (
    "spanbudget_traces_total",
    "spanbudget_stage_overruns_total",
    "spanbudget_spans_received_total",
    "spanbudget_traces_skipped_total",
    "spanbudget_spans_rejected_total",
    "spanbudget_traces_dropped_total",
    "spanbudget_spans_late_total",
    "spanbudget_export_failures_total",
)
# fixtures/VLLM_TRACING.md §4: vLLM 0.33.0's latency histograms (the emulator mirrors them).
VLLM_HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:e2e_request_latency_seconds",
)
# Series Prometheus makes itself rather than scraping them.
PROMETHEUS_SYNTHETIC = frozenset({"up", "ALERTS"})

_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
    | {"group_left", "group_right", "inf", "nan", "Inf", "NaN", "start", "end"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^}]*\}")
_BRACKETS = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", re.IGNORECASE
)
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_LABEL_VALUES = re.compile(r"label_values\(\s*([^,()]+?)\s*,\s*\w+\s*\)")
# An identifier not glued to a digit, dot or word character before it (so not the `m` of
# `5m` nor the `e3` of `1e3`); the lookahead tells function calls from metric names.
_IDENTIFIER = re.compile(r"(?<![\w.:])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana `label_values` query) reads."""
    expr = _LABEL_VALUES.sub(r"\1", expr)
    expr = _STRING.sub(" ", expr)
    expr = _GRAFANA_VARIABLE.sub(" ", expr)
    expr = _BRACES.sub(" ", expr)
    expr = _BRACKETS.sub(" ", expr)
    expr = _GROUPING.sub(" ", expr)
    names = set()
    for match in _IDENTIFIER.finditer(expr):
        name, call = match.group(1), match.group(2)
        if call is None and name not in _KEYWORDS:
            names.add(name)
    return names


def contract_sample_names() -> set[str]:
    """Every sample name the contract promises: histograms expand to their series."""
    names = set(CONTRACT_COUNTERS)
    for family in (*CONTRACT_HISTOGRAMS, *VLLM_HISTOGRAMS):
        names.update(f"{family}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
    return names


def scrape_sample_names(urls: Iterable[str]) -> set[str]:
    """Every sample name that scraping each `/metrics` URL (Prometheus text format) shows.

    A labelled family shows no samples until a label set has been used, but its `# TYPE`
    line is there from the start: such families count with the series they will have.
    """
    names: set[str] = set()
    for url in urls:
        response = httpx.get(url, timeout=10.0)
        response.raise_for_status()
        for family in text_string_to_metric_families(response.text):
            names.update(sample.name for sample in family.samples)
            if family.type == "histogram":
                names.update(f"{family.name}{s}" for s in ("_bucket", "_sum", "_count"))
            elif family.type == "counter":
                names.add(family.name if family.name.endswith("_total") else f"{family.name}_total")
            else:
                names.add(family.name)
    return names
