"""A trace whose parts straddle a restart is judged once, whole: after a start that took
spans back from the intake journal, no trace is judged as complete for the replay wait
(the senders retry what the restart refused, each request on its own back-off, so a root
can come back before its children), and a collector stopped with traces in flight leaves
those without their root to its journal instead of judging them from a part."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from spanbudget.collector.intake.journal import Journal
from spanbudget.collector.intake.otlp import PROTOBUF
from spanbudget.collector.sinks.store import VerdictStore
from spanbudget.collector.spans import Span

from tests.support.collector import Collector, running_collector
from tests.support.otlp import to_request
from tests.support.traces import rag_trace

PER_TRACE = len(rag_trace().spans)


def parts(trace_id: str) -> list[list[Span]]:
    """The trace in three exports, children first, as its services send it: each span
    leaves when it ends, the root last."""
    ordered = sorted(rag_trace(trace_id=trace_id, retrieval=30).spans, key=lambda s: s.end_ns)
    return [ordered[:5], ordered[5:8], ordered[8:]]


def post(collector: Collector, spans: list[Span]) -> None:
    assert collector.post(to_request(spans).SerializeToString(), PROTOBUF).status_code == 200


def whole(verdict: dict[str, object]) -> bool:
    """Judged from every span, the first time: no span met after judging, no revision."""
    return (
        verdict["spans"] == PER_TRACE and not verdict["late_spans"] and not verdict.get("revisions")
    )


@pytest.mark.parametrize("wait", [3.0, 0.0], ids=["replay-wait", "none"])
def test_after_a_restart_with_traces_in_flight_a_root_retried_first_waits_for_the_rest(
    tmp_path: Path, wait: float
) -> None:
    """Trace a's first part was acknowledged before a kill -9 (it is in the journal); trace
    b was refused whole during the restart. Both roots come back before their children."""
    a, b = "a1" * 16, "b2" * 16
    journal = Journal(tmp_path / "verdicts.intake")  # what the killed process left
    body = to_request(parts(a)[0]).SerializeToString()
    journal.append(body, {a}, content_type=PROTOBUF, content_encoding=None)
    journal.close()
    with running_collector(tmp_path, replay_wait_seconds=wait) as collector:
        post(collector, parts(a)[2])
        post(collector, parts(b)[2])
        time.sleep(1.0)  # five decision waits
        early = {t: collector.client.get(f"/api/verdicts/{t}").status_code for t in (a, b)}
        post(collector, parts(a)[1])
        post(collector, parts(b)[0] + parts(b)[1])
        if not wait:  # what the replay wait is for: both judged from a part, first
            assert early == {a: 200, b: 200}
            return
        assert early == {a: 404, b: 404}
        verdicts = [collector.verdict(t) for t in (a, b)]
        assert all(whole(v) for v in verdicts), verdicts
        assert collector.metric("spanbudget_verdicts_revised_total") == 0


def test_stopped_with_traces_in_flight_it_leaves_the_rootless_ones_to_its_journal(
    tmp_path: Path,
) -> None:
    """SIGTERM's path (the pipeline closed): the trace whose root came is judged, the one
    still waiting for its root is not judged from its part but kept in the journal; after
    the restart its root joins it and it is judged once, whole."""
    c, d = "c3" * 16, "d4" * 16
    with running_collector(tmp_path, replay_wait_seconds=0.5) as collector:
        post(collector, [span for part in parts(c) for span in part])
        post(collector, parts(d)[0] + parts(d)[1])
        assert whole(collector.verdict(c))
    store = VerdictStore(tmp_path / "verdicts.db", retention_seconds=3600, retention_count=100)
    try:
        assert store.get(d) is None
    finally:
        store.close()
    journal = Journal(tmp_path / "verdicts.intake")
    assert len(list(journal.entries())) == 1
    journal.close()
    with running_collector(tmp_path, replay_wait_seconds=0.5) as collector:
        post(collector, parts(d)[2])
        assert whole(collector.verdict(d))
        assert collector.verdict(c)["late_spans"] == 0  # not offered again
