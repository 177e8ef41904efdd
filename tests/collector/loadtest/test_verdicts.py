"""Joining a run's verdicts from a real collector's API, also past the API's page size."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.loadtest.verdicts import CollectorUnavailable, wait_for_verdicts

from tests.support.collector import BUDGET, running_collector
from tests.support.otlp import to_request
from tests.support.traces import rag_trace

PROTOBUF = "application/x-protobuf"


def test_a_run_larger_than_one_api_page_gets_every_verdict(tmp_path: Path) -> None:
    # The listing serves at most 1000 verdicts: a run of 1,100 must still be joined whole,
    # and asking for more than a page must not be refused as a bad request.
    count = 1_100
    trace_ids = [f"{n + 1:032x}" for n in range(count)]
    with running_collector(tmp_path) as collector:
        for start in range(0, count, 200):
            spans = []
            for trace_id in trace_ids[start : start + 200]:
                spans += rag_trace(trace_id=trace_id).spans
            body = to_request(spans).SerializeToString()
            assert collector.post(body, PROTOBUF).status_code == 200
        assert collector.pipeline.core.wait_idle(60)
        found = wait_for_verdicts(collector.url, "run-1", trace_ids, timeout_s=5, poll_s=0.1)
    assert set(found) == set(trace_ids)
    expected = Evaluator(load_budget(BUDGET).budget).evaluate(
        rag_trace(trace_id=trace_ids[0]).spans, evaluated_at=found[trace_ids[0]].evaluated_at
    )
    assert expected is not None
    # The served JSON, read back into the verdict the collector made: the evaluator's, with
    # the prompt's tokens from the engine's span.
    carried = {**expected.attributes, "gen_ai.usage.input_tokens": 512}
    assert found[trace_ids[0]] == replace(expected, attributes=carried)
    assert all(found[t].trace_id == t for t in trace_ids)


def test_a_collector_that_asks_for_a_token_is_read_with_it(tmp_path: Path) -> None:
    trace_ids = [f"{n + 1:032x}" for n in range(3)]
    with running_collector(tmp_path, api_token="r3ad") as collector:
        spans = [s for trace_id in trace_ids for s in rag_trace(trace_id=trace_id).spans]
        assert collector.post(to_request(spans).SerializeToString(), PROTOBUF).status_code == 200
        assert collector.pipeline.core.wait_idle(10)
        with pytest.raises(CollectorUnavailable, match="401"):
            wait_for_verdicts(collector.url, "run-1", trace_ids, timeout_s=0)
        found = wait_for_verdicts(collector.url, "run-1", trace_ids, timeout_s=5, token="r3ad")
    assert set(found) == set(trace_ids)
