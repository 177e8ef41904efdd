"""The gateway's /metrics: requests by status for Prometheus' scrape job, never traced."""

from __future__ import annotations

import pytest

from tests.service.conftest import GatewayFactory, chat_body

pytestmark = pytest.mark.anyio


async def test_metrics_count_requests_by_status(make_gateway: GatewayFactory) -> None:
    gateway = make_gateway()
    async with gateway.client() as client:
        ok = await client.post("/v1/chat/completions", json=chat_body(stream=True))
        assert ok.status_code == 200
        bad = await client.post("/v1/chat/completions", content=b"{not json")
        assert bad.status_code == 400
        gateway.exporter.clear()
        scrape = await client.get("/metrics")
    assert scrape.status_code == 200
    text = scrape.text
    assert 'rag_gateway_requests_total{code="200"} 1.0' in text
    assert 'rag_gateway_requests_total{code="400"} 1.0' in text
    assert "rag_gateway_requests_in_flight 0.0" in text
    assert "process_cpu_seconds_total" in text
    assert gateway.spans() == []  # scrapes leave no spans
