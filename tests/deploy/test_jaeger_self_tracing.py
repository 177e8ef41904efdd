"""deploy/jaeger.yaml keeps Jaeger from tracing itself: Jaeger v2 traces its query service
by default and exports those spans over OTLP/gRPC to OTEL_EXPORTER_OTLP_ENDPOINT, else
localhost:4317 — where `spanbudget collect` listens, or a user's own pipeline. Run on the
Jaeger `make binaries` builds, with a budget collector's OTLP/gRPC as that endpoint: the
shipped file sends it nothing, and the same file with `enable_tracing: true` (the
default) sends it Jaeger's own spans."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import yaml
from spanbudget.app.processes import Supervisor
from spanbudget.app.stack import JAEGER_CONFIG

from tests.support.binaries import go_binary
from tests.support.servers import free_port, wait_until
from tests.support.stack import jaeger_on_free_ports

from .processes import budget_collector, metric_total


@pytest.mark.parametrize("tracing", [False, True], ids=["shipped", "enable_tracing"])
def test_jaeger_sends_no_spans_of_its_own_to_the_otlp_port(tmp_path: Path, tracing: bool) -> None:
    config = yaml.safe_load(JAEGER_CONFIG.read_text())
    assert config["extensions"]["jaeger_query"]["enable_tracing"] is False
    if tracing:
        config["extensions"]["jaeger_query"]["enable_tracing"] = True
    (tmp_path / "jaeger.yaml").write_text(yaml.safe_dump(config))
    port, grpc_port = free_port(), free_port()
    collector = budget_collector("budget", port, tmp_path, grpc_port=grpc_port)
    jaeger = jaeger_on_free_ports(go_binary("jaeger"), tmp_path / "jaeger.yaml")
    child = jaeger.child(tmp_path / "jaeger.log")
    child.env = {
        **child.env,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{grpc_port}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms: its spans leave at once
    }
    supervisor = Supervisor()
    try:
        for process in (collector, child):
            supervisor.start(process)
            supervisor.wait_healthy(process, 120)
        with httpx.Client(base_url=jaeger.query_url, timeout=10) as client:
            for _ in range(5):  # what the web UI, `check` and the pull ask Jaeger
                assert client.get("/api/services").status_code == 200
                client.get("/api/traces", params={"service": "rag-gateway", "limit": 5})
                client.get("/api/v3/services")

        def received() -> float:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            return metric_total(text, "spanbudget_intake_spans", transport="grpc")

        if tracing:  # the control: this is where Jaeger's spans go when it traces itself
            wait_until(lambda: received() > 0, "Jaeger's own spans", timeout=15, every=0.2)
        else:
            time.sleep(3)  # thirty times its export delay
            assert received() == 0
    finally:
        supervisor.stop_all()
