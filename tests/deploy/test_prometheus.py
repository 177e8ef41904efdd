"""Prometheus and Alertmanager configs through the real promtool and amtool (Debian)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from spanbudget.collector.alerts.burnrate import DEFAULT_RULES, human_duration

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = REPO / "deploy" / "prometheus"
ALERTMANAGER = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
# DESIGN §8 / Google SRE workbook: (alert, severity, long window, short window, burn rate).
BURN_RATE_ALERTS = {
    ("SpanbudgetBurnRateFast", "page", "1h", "5m", 14.4),
    ("SpanbudgetBurnRateSlow", "page", "6h", "30m", 6.0),
    ("SpanbudgetBurnRateTicket", "ticket", "3d", "6h", 1.0),
}


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def promtool(debian_binary: Callable[[str], str]) -> str:
    return debian_binary("promtool")


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((PROMETHEUS / "budget-alerts.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


@pytest.fixture(scope="module")
def budget() -> dict[str, Any]:
    document = yaml.safe_load((REPO / "budget.yaml").read_text())
    assert isinstance(document, dict)
    return document


def test_promtool_accepts_the_prometheus_config_and_its_rule_file(promtool: str) -> None:
    result = _run([promtool, "check", "config", str(PROMETHEUS / "prometheus.yml")])
    assert "budget-alerts.yml" in result.stdout + result.stderr


def test_promtool_accepts_the_rule_file(promtool: str) -> None:
    result = _run([promtool, "check", "rules", str(PROMETHEUS / "budget-alerts.yml")])
    assert "SUCCESS" in result.stdout


def test_rule_unit_tests_pass_14_4x_burn_pages_and_half_x_stays_silent(promtool: str) -> None:
    test_file = PROMETHEUS / "budget-alerts.test.yml"
    names = [t["name"] for t in yaml.safe_load(test_file.read_text())["tests"]]
    assert any("15x burn" in n and "pages" in n for n in names)
    assert any("exactly 14.4x pages" in n for n in names)
    assert any("0.5x burn stays silent" in n for n in names)
    assert any("less than the 2m for never pages" in n for n in names)
    assert any("held 2m" in n for n in names)
    _run([promtool, "test", "rules", str(test_file)])


@pytest.mark.parametrize("setting", ["for", "keep_firing_for"])
def test_rule_unit_tests_fail_without_the_fast_pages_for_or_hold(
    promtool: str, tmp_path: Path, setting: str
) -> None:
    """The unit tests pin the pending time and the hold: dropping either must break them."""
    rules_text = (PROMETHEUS / "budget-alerts.yml").read_text()
    line = f"        {setting}: 2m\n"
    assert rules_text.count(line) == 1
    (tmp_path / "budget-alerts.yml").write_text(rules_text.replace(line, ""))
    test_file = tmp_path / "budget-alerts.test.yml"
    test_file.write_text((PROMETHEUS / "budget-alerts.test.yml").read_text())
    result = subprocess.run(
        [promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "SpanbudgetBurnRateFast" in result.stdout + result.stderr


def test_rule_unit_tests_fail_when_the_page_threshold_is_wrong(
    promtool: str, tmp_path: Path
) -> None:
    """The unit tests pin the 14.4x threshold: raising it must break them."""
    rules_text = (PROMETHEUS / "budget-alerts.yml").read_text()
    assert rules_text.count(">= 14.4") == 2
    (tmp_path / "budget-alerts.yml").write_text(rules_text.replace(">= 14.4", ">= 16", 1))
    test_file = tmp_path / "budget-alerts.test.yml"
    test_file.write_text((PROMETHEUS / "budget-alerts.test.yml").read_text())
    result = subprocess.run(
        [promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "SpanbudgetBurnRateFast" in result.stdout + result.stderr


def test_amtool_accepts_the_alertmanager_config(debian_binary: Callable[[str], str]) -> None:
    result = _run([debian_binary("amtool"), "check-config", str(ALERTMANAGER)])
    assert "SUCCESS" in result.stdout


def test_alerts_follow_the_multiwindow_multiburn_table(rules: list[dict[str, Any]]) -> None:
    found = set()
    for rule in (r for r in rules if "alert" in r):
        labels = rule["labels"]
        rate = float(labels["burn_rate_threshold"])
        long_w, short_w = labels["long_window"], labels["short_window"]
        expected = (
            f"spanbudget:burn_rate:rate{long_w} >= {labels['burn_rate_threshold']} and "
            f"spanbudget:burn_rate:rate{short_w} >= {labels['burn_rate_threshold']}"
        )
        assert rule["expr"] == expected
        found.add((rule["alert"], labels["severity"], long_w, short_w, rate))
    assert found == BURN_RATE_ALERTS


def test_alerts_wait_and_hold_as_long_as_the_collectors_own(rules: list[dict[str, Any]]) -> None:
    """The same `for` and hold as the collector's default rules, rule for rule."""
    in_file = {
        (r["labels"]["long_window"], r["labels"]["short_window"]): (r["for"], r["keep_firing_for"])
        for r in rules
        if "alert" in r
    }
    in_collector = {
        (human_duration(r.long_s), human_duration(r.short_s)): (
            human_duration(r.for_s),
            human_duration(r.keep_firing_s),
        )
        for r in DEFAULT_RULES
    }
    assert (
        in_file
        == in_collector
        == {
            ("1h", "5m"): ("2m", "2m"),
            ("6h", "30m"): ("15m", "15m"),
            ("3d", "6h"): ("3h", "3h"),
        }
    )


def test_rule_numbers_match_budget_yaml(
    rules: list[dict[str, Any]], budget: dict[str, Any]
) -> None:
    """budget.yaml is the only place budget numbers live; the rule file must follow it."""
    (error_budget,) = [r for r in rules if r.get("record") == "spanbudget:error_budget"]
    assert error_budget["labels"] == {"budget": budget["name"]}
    match = re.fullmatch(r"vector\(([\d.]+)\)", error_budget["expr"])
    assert match, error_budget["expr"]
    assert float(match.group(1)) == pytest.approx(1 - budget["slo"]["objective"])

    limit = f"{budget['total']['limit_ms'] / 1000:g}"
    totals = [r for r in rules if r.get("labels") == {"stage": "total"}]
    assert len(totals) == 5
    for rule in totals:
        assert f'{{budget="{budget["name"]}", le="{limit}"}}' in rule["expr"]
    stage_names = {stage["name"] for stage in budget["stages"]}
    assert "total" not in stage_names, "stage=total is the TTFT series"


def test_every_window_is_recorded_for_ratios_and_burn_rates(rules: list[dict[str, Any]]) -> None:
    windows = {w for _, _, long_w, short_w, _ in BURN_RATE_ALERTS for w in (long_w, short_w)}
    records = [r["record"] for r in rules if "record" in r]
    for window in windows:
        assert records.count(f"spanbudget:error_ratio:rate{window}") == 2  # stages, total
        assert records.count(f"spanbudget:burn_rate:rate{window}") == 1
        for rule in rules:
            if (
                rule.get("record", "").endswith(f":rate{window}")
                and "error_ratio" in rule["record"]
            ):
                assert set(re.findall(r"\[(\w+)\]", rule["expr"])) == {window}


def test_prometheus_scrapes_every_spanbudget_process_and_alerts_alertmanager() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["spanbudget-collector"]["dns_sd_configs"][0] == {
        "names": ["budget-collectors"],
        "type": "A",
        "port": 4318,
        "refresh_interval": "15s",
    }
    assert jobs["rag-gateway"]["static_configs"][0]["targets"] == ["gateway:8080"]
    assert jobs["llm"]["dns_sd_configs"][0]["names"] == ["llm"]
    assert jobs["otel-collector"]["static_configs"][0]["targets"] == ["otel-collector:8888"]
    targets = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["alertmanager:9093"]
    assert config["rule_files"] == ["budget-alerts.yml"]
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert "--enable-feature=exemplar-storage" in compose["prometheus"]["command"]
