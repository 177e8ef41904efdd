"""`kill -9` drill: what `spanbudget collect` acknowledged survives it. Traces arrive in two
requests each (children, then the root a fifth of a second later, as spans leave separate
processes); the collector is killed mid-stream, started again on the same files, and the
client sends what it had not sent yet. With the journal (the default) every acknowledged
trace is judged, whole; without it (the drill's 'before'), the traces inside the decision
wait are lost and roots arriving after the restart are judged alone, as fragments."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.deploy.processes import spanbudget_command, start_process, stop_process
from tests.support.otlp import to_request
from tests.support.servers import free_port
from tests.support.traces import rag_trace

TRACES = 150
LAG = 20  # a trace's root follows its children this many requests later (~0.2 s)
PER_TRACE = len(rag_trace().spans)


def trace_id(i: int) -> str:
    return f"{0xD0 << 120 | i:032x}"


def request(children_of: int | None, root_of: int | None) -> bytes:
    spans = []
    if children_of is not None:
        spans += rag_trace(trace_id=trace_id(children_of), retrieval=30).spans[1:]
    if root_of is not None:
        spans += rag_trace(trace_id=trace_id(root_of), retrieval=30).spans[:1]
    return bytes(to_request(spans).SerializeToString())


@pytest.mark.parametrize("journal", [True, False], ids=["journal", "no-journal"])
def test_kill_9_loses_no_acknowledged_trace_and_stores_no_fragment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journal: bool
) -> None:
    monkeypatch.setenv("SPANBUDGET_COLLECTOR_JOURNAL", "true" if journal else "false")
    # The client sends what it still had at once: no need to wait the default 30 s for
    # retries (test_replay_wait.py tests the wait itself).
    monkeypatch.setenv("SPANBUDGET_COLLECTOR_REPLAY_WAIT_SECONDS", "1")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = spanbudget_command(
        "collect",
        *("--listen", f"127.0.0.1:{port}", "--grpc-listen", "off"),  # not the shared 4317
        *("--db", str(tmp_path / "verdicts.db")),
    )
    headers = {"Content-Type": "application/x-protobuf"}
    children_acked: set[int] = set()
    roots_acked: set[int] = set()
    first = start_process(command, f"{url}/healthz", tmp_path / "first.log")
    with httpx.Client(base_url=url, timeout=10) as client:
        for i in range(TRACES):  # 100 requests/s; the decision wait (2 s) outlasts them all
            root = i - LAG if i >= LAG else None
            answer = client.post("/v1/traces", content=request(i, root), headers=headers)
            assert answer.status_code == 200
            children_acked.add(i)
            if root is not None:
                roots_acked.add(root)
            time.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = start_process(command, f"{url}/healthz", tmp_path / "second.log")
        try:
            for root in sorted(children_acked - roots_acked):  # what the client still had
                answer = client.post("/v1/traces", content=request(None, root), headers=headers)
                assert answer.status_code == 200
                roots_acked.add(root)
            time.sleep(3.5)  # past the decision wait
            verdicts = {
                v["trace_id"]: v for v in client.get("/api/verdicts", params={"limit": 1000}).json()
            }
        finally:
            stop_process(second)
    whole = [i for i in range(TRACES) if verdicts.get(trace_id(i), {}).get("spans") == PER_TRACE]
    fragments = [v for v in verdicts.values() if v["spans"] != PER_TRACE]
    lost = [i for i in range(TRACES) if trace_id(i) not in verdicts]
    print(
        f"\njournal={journal}: {len(whole)} of {TRACES} acknowledged traces judged whole,"
        f" {len(fragments)} fragments stored as verdicts, {len(lost)} lost"
    )
    if journal:
        assert (len(whole), len(fragments), len(lost)) == (TRACES, 0, 0)
        assert "offered again" in (tmp_path / "second.log").read_text()
        assert not list((tmp_path / "verdicts.intake").glob("*.log"))  # every entry done
    else:  # the drill's 'before': what the journal is for
        assert len(whole) < TRACES
        assert fragments or lost
