"""Grafana provisioning, and the metric names the dashboard and the rules depend on."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from .metric_names import (
    CONTRACT_COUNTERS,
    CONTRACT_HISTOGRAMS,
    PROMETHEUS_SYNTHETIC,
    VLLM_HISTOGRAMS,
    contract_sample_names,
    promql_metric_names,
    scrape_sample_names,
)

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "deploy" / "grafana"
RULES = REPO / "deploy" / "prometheus" / "budget-alerts.yml"


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    document = json.loads((GRAFANA / "dashboards" / "spanbudget.json").read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def datasources() -> dict[str, dict[str, Any]]:
    document = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "datasources.yml").read_text()
    )
    return {source["uid"]: source for source in document["datasources"]}


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    queries = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]
        queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def test_promql_name_extraction_finds_metrics_and_skips_everything_else() -> None:
    quantile = (
        "histogram_quantile(0.95, sum by (le, stage) "
        '(rate(a_bucket{budget="$budget",le="0.25"}[$__rate_interval])))'
    )
    assert promql_metric_names(quantile) == {"a_bucket"}
    assert promql_metric_names("x:ratio:rate5m / on (budget) group_left () y:budget") == {
        "x:ratio:rate5m",
        "y:budget",
    }
    assert promql_metric_names('count(ALERTS{alertstate="firing"}) or vector(0)') == {"ALERTS"}
    assert promql_metric_names("label_values(spanbudget_traces_total, budget)") == {
        "spanbudget_traces_total"
    }
    assert promql_metric_names(
        "rate(vllm:e2e_request_latency_seconds_count[5m] offset 1h) > 1e3"
    ) == {"vllm:e2e_request_latency_seconds_count"}


@pytest.mark.slow
def test_every_metric_the_dashboard_queries_is_exposed_or_recorded(
    dashboard: dict[str, Any], rules: list[dict[str, Any]], exposed_names: set[str]
) -> None:
    recorded = {rule["record"] for rule in rules if "record" in rule}
    queried = set().union(*(promql_metric_names(q) for q in _dashboard_queries(dashboard)))
    unknown = queried - exposed_names - recorded - PROMETHEUS_SYNTHETIC
    assert unknown == set()
    # The dashboard covers the budget, the burn rates, the pipeline and the engine.
    assert {"spanbudget_ttft_seconds_bucket", "spanbudget_stage_duration_seconds_bucket"} <= queried
    assert {f"spanbudget:burn_rate:rate{w}" for w in ("5m", "30m", "1h", "6h", "3d")} <= queried
    assert set(CONTRACT_COUNTERS) <= queried
    assert "vllm:time_to_first_token_seconds_bucket" in queried


@pytest.mark.slow
def test_every_metric_the_rules_read_is_exposed_or_recorded(
    rules: list[dict[str, Any]], exposed_names: set[str]
) -> None:
    recorded = {rule["record"] for rule in rules if "record" in rule}
    read = set().union(*(promql_metric_names(rule["expr"]) for rule in rules))
    assert read - exposed_names - recorded == set()
    assert {
        "spanbudget_stage_overruns_total",
        "spanbudget_traces_total",
        "spanbudget_ttft_seconds_bucket",
        "spanbudget_ttft_seconds_count",
    } <= read


@pytest.mark.slow
def test_running_collector_and_emulator_expose_the_contract(exposed_names: set[str]) -> None:
    """DESIGN §7's names and vLLM's (VLLM_TRACING.md §4), in a real scrape of each process."""
    assert contract_sample_names() <= exposed_names
    assert "spanbudget_ttft_seconds_bucket" in exposed_names


@pytest.fixture
def contract_exporter() -> Iterator[str]:
    """A real /metrics endpoint (prometheus_client) exposing the contract's families."""
    registry = CollectorRegistry()
    for name in CONTRACT_HISTOGRAMS:
        Histogram(
            name.removesuffix("_seconds"), "", ["budget"], unit="seconds", registry=registry
        ).labels("rag-ttft").observe(0.1)
    for name in VLLM_HISTOGRAMS:
        Histogram(name, "", registry=registry).observe(0.1)
    for name in CONTRACT_COUNTERS:
        Counter(name, "", ["budget"], registry=registry).labels("rag-ttft").inc()
    Counter("spanbudget_not_used_yet", "", ["reason"], registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    assert isinstance(server, WSGIServer)
    assert isinstance(thread, threading.Thread)
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_scraping_a_real_exposition_yields_the_contract_names(contract_exporter: str) -> None:
    """The scrape reader finds every family, also labelled ones not used yet."""
    scraped = scrape_sample_names([contract_exporter])
    assert contract_sample_names() <= scraped
    assert "spanbudget_not_used_yet_total" in scraped
    assert "spanbudget_ttft_seconds_bucket" in scraped
    assert "spanbudget_ttft_seconds" not in scraped


def test_datasources_have_fixed_uids_and_exemplars_open_jaeger(
    datasources: dict[str, dict[str, Any]], dashboard: dict[str, Any]
) -> None:
    assert {uid: s["type"] for uid, s in datasources.items()} == {
        "prometheus": "prometheus",
        "jaeger": "jaeger",
        "alertmanager": "alertmanager",
    }
    assert datasources["prometheus"]["url"] == "http://prometheus:9090"
    assert datasources["jaeger"]["url"] == "http://jaeger:16686"
    assert datasources["alertmanager"]["url"] == "http://alertmanager:9093"
    (destination,) = datasources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert destination == {"name": "trace_id", "datasourceUid": "jaeger"}
    used = {
        item["datasource"]["uid"]
        for panel in _panels(dashboard)
        for item in (panel, *panel.get("targets", []))
        if "datasource" in item
    }
    assert used
    assert used <= set(datasources)
    exemplar_panels = [
        p for p in _panels(dashboard) if any(t.get("exemplar") for t in p.get("targets", []))
    ]
    assert {p["title"] for p in exemplar_panels} >= {"TTFT against the budget", "Stage p95"}


def test_dashboard_thresholds_match_budget_yaml(dashboard: dict[str, Any]) -> None:
    budget = yaml.safe_load((REPO / "budget.yaml").read_text())
    panels = {p["title"]: p for p in _panels(dashboard)}

    def steps(thresholds: dict[str, Any]) -> list[float]:
        return [step["value"] for step in thresholds["steps"][1:]]

    total = budget["total"]
    ttft = panels["TTFT against the budget"]["fieldConfig"]["defaults"]["thresholds"]
    assert steps(ttft) == [total["target_ms"] / 1000, total["limit_ms"] / 1000]
    bars = panels["Stage p95 against its limit (5m)"]["fieldConfig"]["overrides"]
    per_stage = {
        o["matcher"]["options"]: steps(
            next(p["value"] for p in o["properties"] if p["id"] == "thresholds")
        )
        for o in bars
    }
    assert per_stage == {
        s["name"]: [s["target_ms"] / 1000, s["limit_ms"] / 1000] for s in budget["stages"]
    }
    ratio = panels["Share of requests over limit, by stage (5m)"]["fieldConfig"]["defaults"]
    assert steps(ratio["thresholds"]) == [pytest.approx(1 - budget["slo"]["objective"])]


def test_dashboard_provider_reads_the_folder_compose_mounts(dashboard: dict[str, Any]) -> None:
    provider = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "dashboards.yml").read_text()
    )
    path = provider["providers"][0]["options"]["path"]
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["grafana"]
    assert f"./deploy/grafana/dashboards:{path}:ro" in compose["volumes"]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in compose["volumes"]
    home = compose["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{path}/spanbudget.json"
    assert dashboard["uid"] == "spanbudget"
    assert len({p["id"] for p in _panels(dashboard)}) == len(list(_panels(dashboard)))
