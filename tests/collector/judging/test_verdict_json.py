"""A batch of verdicts as the store writes them (`verdict.to_json`) is the same text as each
verdict's `to_dict` written as JSON, whatever the verdict holds: the optional fields,
mappings that are not dicts, values orjson refuses, instants shared or not."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType

from spanbudget.collector import json_text
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict, to_json

from tests.support.layout import REPO
from tests.support.traces import rag_trace

NOW = datetime(2026, 12, 7, 13, 0, 0, 123456, tzinfo=UTC)


def verdicts() -> list[Verdict]:
    evaluator = Evaluator(load_budget(REPO / "budget.yaml").budget)
    judged = [
        evaluator.evaluate(rag_trace(trace_id=f"{i:032x}", retrieval=9 * i).spans, evaluated_at=NOW)
        for i in range(6)
    ]
    plain = [v for v in judged if v is not None]
    first = plain[0]
    stage = replace(first.stages[0], breakdown=MappingProxyType({"gateway.validate": 1.5}))
    return [
        *plain,
        replace(first, damaged={"missing_parent": 2}, response_ms=12.5, instrumentation="genai"),
        replace(
            first, first_token={"source": "attribute", "mark": "x", "span": "chat", "exact": True}
        ),
        replace(first, attributes=MappingProxyType({"loadtest.run_id": "r", "n": 2**70})),
        replace(first, stages=(stage, *first.stages[1:]), attributes={"x": float("nan")}),
        replace(first, evaluated_at=NOW + timedelta(seconds=1)),
        replace(first, evaluated_at=NOW.astimezone(UTC).replace(tzinfo=None)),
    ]


def test_a_batch_is_written_as_each_verdicts_document() -> None:
    batch = verdicts()
    written = to_json(batch)
    assert written == [json_text.dumps(v.to_dict()).decode() for v in batch]
    assert written == [v.to_json() for v in batch]
    # And it reads back as the verdict it was.
    assert [Verdict.from_dict(json.loads(text)).trace_id for text in written] == [
        v.trace_id for v in batch
    ]
    assert json.loads(written[-4])["attributes"]["n"] == 2**70  # past orjson: the stdlib's
    assert json.loads(written[-3])["attributes"]["x"] is None  # NaN: JSON has none


def test_an_equal_instant_in_another_zone_is_written_in_its_own() -> None:
    first = verdicts()[0]
    elsewhere = replace(first, evaluated_at=NOW.astimezone(timezone(timedelta(hours=1))))
    texts = to_json([first, elsewhere])
    assert json.loads(texts[0])["evaluated_at"] == "2026-12-07T13:00:00.123+00:00"
    assert json.loads(texts[1])["evaluated_at"] == "2026-12-07T14:00:00.123+01:00"
