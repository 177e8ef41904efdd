"""A real Prometheus (Debian) scrapes a running budget collector and evaluates the rule file."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import yaml

from tests.support.servers import free_port

from .processes import REPO, send_overrun_trace, start_process, stop_process

RULES = REPO / "deploy" / "prometheus" / "budget-alerts.yml"


@pytest.fixture(scope="module")
def prometheus(
    debian_binary: Callable[[str], str],
    live_collector: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """Prometheus scraping the live collector every second, with exemplar storage on."""
    tmp = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "spanbudget-collector",
                "static_configs": [{"targets": [live_collector.removeprefix("http://")]}],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [
        debian_binary("prometheus"),
        f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--enable-feature=exemplar-storage",
    ]
    process = start_process(command, f"{base}/-/ready", tmp / "prometheus.log")
    try:
        yield base
    finally:
        stop_process(process)


def _query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5)
    response.raise_for_status()
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def _eventually(probe: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := probe():
            return value
        time.sleep(0.5)
    pytest.fail(f"never happened: {what}")


@pytest.mark.slow
def test_rules_page_on_a_real_collector_whose_retrieval_overruns(
    prometheus: str, live_collector: str
) -> None:
    # Keep overrun traces coming until two scrapes have seen the counters grow.
    trace_ids: list[str] = []

    def send_and_query() -> list[dict[str, Any]]:
        trace_ids.append(uuid.uuid4().hex)
        send_overrun_trace(live_collector, trace_ids[-1])
        return _query(prometheus, 'spanbudget:error_ratio:rate5m{stage="retrieval"} > 0')

    ratios = _eventually(send_and_query, "a retrieval error ratio")
    # Every judged trace overran retrieval: ratio 1, burn rate 1 / 0.05 = 20.
    assert [(r["metric"]["budget"], float(r["value"][1])) for r in ratios] == [("rag-ttft", 1.0)]
    burn = _eventually(
        lambda: _query(prometheus, 'spanbudget:burn_rate:rate1h{stage="retrieval"}'), "a burn rate"
    )
    assert float(burn[0]["value"][1]) == pytest.approx(20.0)
    # TTFT 190 ms is within the 250 ms total: the total ratio is recorded, and zero.
    total = _eventually(
        lambda: _query(prometheus, 'spanbudget:error_ratio:rate5m{stage="total"}'), "total"
    )
    assert float(total[0]["value"][1]) == 0.0

    def fast_page() -> list[dict[str, Any]]:
        alerts = httpx.get(f"{prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "SpanbudgetBurnRateFast"]

    # Seconds into the burn, the page is pending: it fires only after burning for 2m.
    (alert,) = _eventually(fast_page, "the fast burn-rate page")
    assert alert["state"] == "pending"
    assert alert["labels"]["stage"] == "retrieval"
    assert alert["labels"]["severity"] == "page"

    # The histograms carry trace-id exemplars that Prometheus stores (for Grafana's links).
    def exemplar_ids() -> set[str]:
        now = time.time()
        response = httpx.get(
            f"{prometheus}/api/v1/query_exemplars",
            params={
                "query": "spanbudget_stage_duration_seconds_bucket",
                "start": now - 120,
                "end": now,
            },
            timeout=5,
        )
        return {
            e["labels"]["trace_id"]
            for series in response.json()["data"]
            for e in series["exemplars"]
        }

    assert _eventually(lambda: exemplar_ids() & set(trace_ids), "exemplars with our trace ids")
