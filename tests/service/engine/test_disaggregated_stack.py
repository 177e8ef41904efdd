"""The disaggregated engine in the embedded stack under load: requests whose KV transfer a
fault header slows are blamed on the kv_transfer stage of the example budget, and the web
UI's waterfall shows the stage."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from pathlib import Path

import httpx
import pytest

from tests.support.stack import corpus_copy, local_stack, running

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
ENV = {
    "HF_HUB_OFFLINE": "1",
    "OTEL_BSP_SCHEDULE_DELAY": "200",
    "PYTHONUNBUFFERED": "1",
    "SPANBUDGET_FAULTS": "1",
}
FAULT = "kv_transfer=300"


async def _load(gateway: str, requests: int, rate: float) -> dict[str, bool]:
    """Open-loop load: every fourth request carries the fault header. Trace id -> faulted."""
    sent: dict[str, bool] = {}

    async def one(client: httpx.AsyncClient, model: str, index: int) -> None:
        trace_id = secrets.token_hex(16)
        faulted = index % 4 == 1
        headers = {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
        if faulted:
            headers["x-spanbudget-delay"] = FAULT
        body = {
            "model": model,
            "messages": [{"role": "user", "content": f"How does the with statement work? {index}"}],
            "stream": True,
            "max_tokens": 16,
        }
        async with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            r.raise_for_status()
            async for _ in r.aiter_bytes():
                pass
        sent[trace_id] = faulted

    async with httpx.AsyncClient(base_url=gateway, timeout=60) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        tasks = []
        for index in range(requests):
            tasks.append(asyncio.create_task(one(client, model, index)))
            await asyncio.sleep(1 / rate)
        await asyncio.gather(*tasks)
    return sent


def _verdict(collector: str, trace_id: str) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while True:
        response = httpx.get(f"{collector}/api/verdicts/{trace_id}")
        if response.status_code == 200:
            return dict(response.json())
        assert time.monotonic() < deadline, f"no verdict for {trace_id}"
        time.sleep(0.3)


def test_a_slowed_kv_transfer_is_blamed_on_its_stage(tmp_path: Path, small_corpus: Path) -> None:
    data = corpus_copy(small_corpus, tmp_path)
    spec = dataclasses.replace(
        local_stack(data, tmp_path, ENV),
        budget=REPO / "examples" / "disaggregated-budget.yaml",
        preset="qwen3-8b-h200",
        disaggregated=True,
    )
    with running(spec.children()):
        sent = asyncio.run(_load(spec.gateway_url, requests=24, rate=4.0))
        verdicts = {trace_id: _verdict(spec.collector_url, trace_id) for trace_id in sent}
        faulted = [t for t, f in sent.items() if f]
        page = httpx.get(f"{spec.collector_url}/traces/{faulted[0]}").text
    assert len(faulted) == 6
    for trace_id, was_faulted in sent.items():
        verdict = verdicts[trace_id]
        stages = {s["name"]: s for s in verdict["stages"]}  # type: ignore[attr-defined]
        if was_faulted:
            assert verdict["blame"][0] == "kv_transfer", verdict  # type: ignore[index]
            assert stages["kv_transfer"]["ms"] >= 300, verdict
        else:  # a few ms of link; on a busy machine also the API server's delivery
            assert verdict["blame"][:1] != ["kv_transfer"], verdict  # type: ignore[index]
            assert 0 < stages["kv_transfer"]["ms"] < 100, verdict  # its own, not prefill's
    assert "kv_transfer" in page  # the waterfall's stage key and its segments
