"""The HTTP edges of the collector that a careless or hostile URL reaches: `since` bounds
far in the past, `all` in the API as in the web UI, run ids holding a `/`, and the
headers every page and answer carries."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.live.app import app_for
from spanbudget.collector.live.pipeline import assemble
from spanbudget.collector.live.settings import CollectorSettings

from tests.support.collector import BUDGET, idle_pipeline
from tests.support.traces import rag_trace

RUN_ID = "team/nightly-7"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    pipeline = idle_pipeline(tmp_path)
    evaluator = Evaluator(load_budget(BUDGET).budget)
    now = datetime.now(UTC)
    made = []
    for i in range(20):
        verdict = evaluator.evaluate(
            rag_trace(trace_id=f"{i + 1:032x}", retrieval=i * 3).spans, evaluated_at=now
        )
        assert verdict is not None
        made.append((replace(verdict, attributes={"loadtest.run_id": RUN_ID}), 11))
    pipeline.store.write(made)
    with TestClient(app_for(pipeline), raise_server_exceptions=False) as test_client:
        yield test_client
    pipeline.store.close()


@pytest.mark.parametrize("since", ["99999999999d", "9" * 400, "0001-01-01T00:00:00+00:00"])
@pytest.mark.parametrize("path", ["/", "/overview/body", "/traces", "/api/verdicts"])
def test_a_bound_before_the_epoch_means_everything(
    client: TestClient, path: str, since: str
) -> None:
    response = client.get(path, params={"since": since})
    assert response.status_code == 200, response.text
    everything = client.get(path)
    if path == "/api/verdicts":
        assert response.json() == everything.json()


@pytest.mark.parametrize(
    "bound",
    ["9999-12-31T23:59:59", "9999-12-31T23:59:59-12:00", "2999-01-01T00:00:00+00:00", "0s"],
)
@pytest.mark.parametrize(
    "path", ["/", "/overview/body", "/traces", "/api/verdicts", "/api/summary", "/api/share"]
)
@pytest.mark.parametrize("name", ["since", "until"])
def test_a_bound_in_the_future_is_answered_never_with_a_5xx(
    client: TestClient, path: str, bound: str, name: str
) -> None:
    """Up to the last second a datetime can hold (and past it, in another zone): the
    pages and the API answer, with nothing judged since then, or say what is wrong."""
    response = client.get(path, params={name: bound})
    assert response.status_code < 500, response.text
    if name == "since" and response.status_code == 200 and path == "/api/summary":
        assert response.json()["traces"] == 0


def test_the_api_takes_all_as_the_web_ui_does(client: TestClient) -> None:
    everything = client.get("/api/summary").json()
    assert everything["traces"] == 20
    assert client.get("/api/summary", params={"since": "all"}).json() == everything
    assert len(client.get("/api/verdicts", params={"since": "all"}).json()) == 20
    assert client.get("/api/summary", params={"since": "yesterday"}).status_code == 400


def test_a_run_id_with_a_slash_opens_its_run_page(client: TestClient) -> None:
    runs = client.get("/runs").text
    assert 'href="/runs/team/nightly-7"' in runs
    for path in ("/runs/team/nightly-7", "/runs/team%2Fnightly-7"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert RUN_ID in page.text
    assert client.get("/runs/team/other").status_code == 404


def test_pages_carry_a_content_security_policy_and_every_answer_nosniff(
    client: TestClient,
) -> None:
    page = client.get("/")
    assert page.headers["x-content-type-options"] == "nosniff"
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    for path in ("/api/summary", "/metrics", "/healthz", "/static/ui.js"):
        answer = client.get(path)
        assert answer.headers["x-content-type-options"] == "nosniff", path
        assert "content-security-policy" not in answer.headers, path
    intake = client.post("/v1/traces", content=b"", headers={"Content-Type": "text/plain"})
    assert intake.status_code == 415
    assert intake.headers["x-content-type-options"] == "nosniff"


def test_with_a_receiver_token_the_ui_and_api_ask_for_it_too(tmp_path: Path) -> None:
    settings = CollectorSettings.from_flat(
        grpc_listen="off", db_path=tmp_path / "v.db", budget_path=BUDGET, receiver_token="s3cret"
    )
    pipeline = assemble(settings, load_budget(BUDGET).budget, alerts=False)
    basic = "Basic " + base64.b64encode(b"anyone:s3cret").decode()
    with TestClient(app_for(pipeline)) as test_client:
        for path in ("/", "/traces", "/api/summary", "/api/verdicts", "/runs"):
            refused = test_client.get(path)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"].startswith("Basic")
            assert test_client.get(path, headers={"Authorization": basic}).status_code == 200
        bearer = {"Authorization": "Bearer s3cret"}
        assert test_client.get("/api/summary", headers=bearer).status_code == 200
        wrong = {"Authorization": "Basic " + base64.b64encode(b"anyone:nope").decode()}
        assert test_client.get("/api/summary", headers=wrong).status_code == 401
        assert (
            test_client.get("/api/summary", headers={"Authorization": "Basic %%"}).status_code
            == 401
        )
        for path in ("/healthz", "/readyz", "/metrics", "/static/ui.js"):  # open
            assert test_client.get(path).status_code in (200, 503), path  # 503: not started
    pipeline.store.close()
