"""The running collector judges traces from the real OTel SDK exporter and from every body
format the same way, whatever the order and split of the spans."""

from __future__ import annotations

import gzip
import random
from datetime import UTC, datetime
from pathlib import Path

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.core.processor import BudgetSpanProcessor
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict

from tests.support.collector import (
    BUDGET,
    comparable,
    otlp_json,
    replay_with_sdk,
    running_collector,
)
from tests.support.otlp import to_request
from tests.support.traces import rag_trace

SERVICES = ("spanbudget-loadtest", "rag-gateway", "vllm")
PROTOBUF = "application/x-protobuf"


def test_sdk_exporter_traces_get_the_evaluators_verdicts(tmp_path: Path) -> None:
    with running_collector(tmp_path) as collector:
        url = f"{collector.url}/v1/traces"
        shapes = [rag_trace(retrieval=30), rag_trace(), rag_trace(prefill=60, chat_error=True)]
        sent = []
        for builder in shapes:
            exporters = {s: OTLPSpanExporter(endpoint=url) for s in SERVICES}
            trace_id, providers = replay_with_sdk(builder.spans, exporters)
            for provider in providers:
                provider.shutdown()
            sent.append((trace_id, builder.spans))
        evaluator = Evaluator(load_budget(BUDGET).budget)
        now = datetime.now(UTC)
        for trace_id, spans in sent:
            served = collector.verdict(trace_id)
            expected = evaluator.evaluate(spans, evaluated_at=now)
            assert expected is not None
            # The evaluator's verdict, with the prompt's tokens from the engine's span.
            carried = {**expected.attributes, "gen_ai.usage.input_tokens": 512}
            assert comparable(served) == comparable({**expected.to_dict(), "attributes": carried})
            assert served["spans"] == len(spans)
        statuses = [collector.verdict(t)["status"] for t, _ in sent]
        assert statuses == ["overrun", "ok", "error"]
        assert collector.verdict(sent[0][0])["blame"] == ["retrieval"]
        assert collector.metric("spanbudget_spans_received_total") == sum(len(s) for _, s in sent)


def test_gzip_sdk_exporter_and_budget_span_processor_agree(tmp_path: Path) -> None:
    """The SDK's gzip exporter into the collector, and BudgetSpanProcessor in-process, on
    the same providers: one verdict each, identical."""
    got: list[Verdict] = []
    processor = BudgetSpanProcessor(load_budget(BUDGET).budget, got.append, decision_wait=0.05)
    with running_collector(tmp_path) as collector:
        url = f"{collector.url}/v1/traces"
        exporters = {
            s: OTLPSpanExporter(endpoint=url, compression=Compression.Gzip) for s in SERVICES
        }
        trace_id, providers = replay_with_sdk(
            rag_trace(prompt=25).spans, exporters, extra_processor=processor
        )
        served = collector.verdict(trace_id)
        for provider in providers:
            provider.shutdown()
    assert served["status"] == "overrun"
    assert served["blame"] == ["prompt"]
    assert len(got) == 1
    assert got[0].trace_id == trace_id
    assert comparable(got[0].to_dict()) == comparable(served)
    assert collector.metric("spanbudget_requests_rejected_total", reason="malformed") == 0


def _bodies(spans_request: bytes, json_body: bytes) -> list[tuple[bytes, str, dict[str, str]]]:
    return [
        (spans_request, PROTOBUF, {}),
        (json_body, "application/json", {}),
        (gzip.compress(spans_request), PROTOBUF, {"Content-Encoding": "gzip"}),
        (gzip.compress(json_body), "application/json; charset=utf-8", {"Content-Encoding": "gzip"}),
    ]


def test_protobuf_json_and_gzip_bodies_give_identical_verdicts(tmp_path: Path) -> None:
    with running_collector(tmp_path) as collector:
        results = []
        for i in range(4):
            trace_id = f"{i + 1:032x}"
            spans = rag_trace(trace_id=trace_id, retrieval=25, queue=30).spans
            request = to_request(spans)
            body, content_type, headers = _bodies(request.SerializeToString(), otlp_json(request))[
                i
            ]
            response = collector.post(body, content_type, **headers)
            assert response.status_code == 200, response.text
            assert response.headers["content-type"].startswith(content_type.split(";")[0])
            if content_type == PROTOBUF:
                parsed = ExportTraceServiceResponse.FromString(response.content)
                assert not parsed.HasField("partial_success")
            else:
                assert response.json() == {}
            results.append(comparable(collector.verdict(trace_id)))
    assert results[0]["status"] == "overrun"
    assert all(result == results[0] for result in results[1:])


def test_shuffled_and_split_spans_give_the_same_verdicts(tmp_path: Path) -> None:
    rng = random.Random(7)
    shapes = [
        {"retrieval": 30},
        {},
        {"prefill": 40, "gateway": 8},
        {"network": 60},
        {"marks": False},
    ]
    # A decision wait longer than the posting takes: the test is about split and shuffled
    # delivery, not about a trace judged while a busy machine is still sending its spans.
    with running_collector(tmp_path, decision_wait_seconds=2.0) as collector:
        in_order = []
        for n, shape in enumerate(shapes):
            spans = rag_trace(trace_id=f"a{n:031x}", **shape).spans  # type: ignore[arg-type]
            response = collector.post(to_request(spans).SerializeToString(), PROTOBUF)
            assert response.status_code == 200
            in_order.append(spans)
        shuffled = [
            span
            for n, shape in enumerate(shapes)
            for span in rag_trace(trace_id=f"b{n:031x}", **shape).spans  # type: ignore[arg-type]
        ]
        rng.shuffle(shuffled)
        while shuffled:  # many small requests, traces interleaved
            size = rng.randint(1, 5)
            chunk, shuffled = shuffled[:size], shuffled[size:]
            assert (
                collector.post(to_request(chunk).SerializeToString(), PROTOBUF).status_code == 200
            )
        for n in range(len(shapes)):
            first = collector.verdict(f"a{n:031x}")
            second = collector.verdict(f"b{n:031x}")
            assert comparable(first) == comparable(second)
            assert second["spans"] == len(in_order[n])
    assert first["status"] == "incomplete"
