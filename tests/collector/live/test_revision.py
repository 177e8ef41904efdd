"""Late spans within the revision horizon revise a trace's verdict: a trace judged without
its retrieval span (damaged: two orphans) is judged again, whole, when that span arrives,
and the API, the web UI and /metrics say so. Past the horizon, a late span is only counted."""

from __future__ import annotations

from pathlib import Path

from tests.support.collector import PROTOBUF, running_collector
from tests.support.otlp import to_request
from tests.support.servers import wait_until
from tests.support.traces import rag_trace


def test_a_late_span_within_the_horizon_revises_the_verdict(tmp_path: Path) -> None:
    trace = rag_trace(trace_id="b1" * 16, retrieval=30)  # retrieval 48 ms > 40
    retrieval = next(s for s in trace.spans if s.name == "retrieval rag-docs")
    early = [s for s in trace.spans if s is not retrieval]
    with running_collector(tmp_path, decision_wait_seconds=0.2, revise_seconds=30) as running:
        assert running.post(to_request(early).SerializeToString(), PROTOBUF).status_code == 200
        first = running.verdict("b1" * 16)
        assert first["damaged"] == {"missing_parent": 2}  # its two children, orphaned
        # Judged all the same (DESIGN §5 rule 1), its orphans as children of the root.
        assert first["status"] != "incomplete"
        assert "revisions" not in first
        page = running.client.get(f"/traces/{'b1' * 16}").text
        assert "damaged: 2 missing parent (judged as children of the root" in page

        body = to_request([retrieval]).SerializeToString()
        assert running.post(body, PROTOBUF).status_code == 200
        wait_until(lambda: running.verdict("b1" * 16).get("revisions") == 1, "the verdict revised")
        revised = running.verdict("b1" * 16)
        assert "damaged" not in revised
        assert (revised["status"], revised["blame"]) == ("overrun", ["retrieval"])
        assert (revised["spans"], revised["late_spans"]) == (len(trace.spans), 1)
        assert running.metric("spanbudget_verdicts_revised_total") == 1
        page = running.client.get(f"/traces/{'b1' * 16}").text
        assert "revised 1× by late spans" in page
        assert running.pipeline.spans is not None
        assert running.pipeline.spans.wait_idle(10)
        kept = running.client.get(f"/traces/{'b1' * 16}").text
        assert kept.count("retrieval rag-docs") >= 1  # the waterfall has the late span


def test_past_the_horizon_a_late_span_is_only_counted(tmp_path: Path) -> None:
    trace = rag_trace(trace_id="b2" * 16)
    late = trace.spans[-1]
    with running_collector(tmp_path, decision_wait_seconds=0.2, revise_seconds=0) as running:
        body = to_request(trace.spans[:-1]).SerializeToString()
        assert running.post(body, PROTOBUF).status_code == 200
        first = running.verdict("b2" * 16)
        assert running.post(to_request([late]).SerializeToString(), PROTOBUF).status_code == 200
        wait_until(lambda: running.verdict("b2" * 16)["late_spans"] == 1, "the late span counted")
        again = running.verdict("b2" * 16)
        assert "revisions" not in again
        assert {k: v for k, v in again.items() if k != "late_spans"} == {
            k: v for k, v in first.items() if k != "late_spans"
        }
        assert running.metric("spanbudget_verdicts_revised_total") == 0
