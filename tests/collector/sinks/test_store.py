"""The SQLite verdict store: survives a restart, applies retention, and summarises exactly
(percentiles checked against numpy on the same data)."""

from __future__ import annotations

import random
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Status, Verdict
from spanbudget.collector.sinks.store import PAGE_SIZE, VerdictStore, insert_rows
from spanbudget.collector.stats import PERCENTILES, percentile

from tests.support.collector import BUDGET, running_collector
from tests.support.otlp import to_request
from tests.support.traces import rag_trace

PROTOBUF = "application/x-protobuf"


def _verdicts(count: int, seed: int = 1, run_id: str = "run-1") -> list[Verdict]:
    rng = random.Random(seed)
    evaluator = Evaluator(load_budget(BUDGET).budget)
    out = []
    for i in range(count):
        spans = rag_trace(
            trace_id=f"{seed:08x}{i:024x}",
            retrieval=rng.uniform(0, 40),
            prefill=rng.uniform(0, 60),
            network=rng.choice([0, 0, 30]),
            client_root=rng.random() > 0.2,
            marks=rng.random() > 0.1,
        ).spans
        spans = [
            replace(s, attributes={**s.attributes, "loadtest.run_id": run_id})
            if s.parent_span_id is None
            else s
            for s in spans
        ]
        verdict = evaluator.evaluate(spans, evaluated_at=datetime.now(UTC))
        assert verdict is not None
        out.append(verdict)
    return out


def _store(path: Path, **overrides: float) -> VerdictStore:
    values = {"retention_seconds": 86400.0, "retention_count": 1_000_000, **overrides}
    return VerdictStore(path, **values)  # type: ignore[arg-type]


def test_percentile_matches_numpy_exactly() -> None:
    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 10, 101, 1000):
        values = sorted(np.round(rng.gamma(2.0, 20.0, n), 2).tolist())
        for p in (*PERCENTILES, 0, 12.5, 100):
            assert percentile(values, p) == float(np.percentile(values, p)), (n, p)
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_summary_per_stage_matches_numpy_on_the_same_data(tmp_path: Path) -> None:
    store = _store(tmp_path / "v.db")
    verdicts = _verdicts(300)
    store.write([(v, 11) for v in verdicts])
    summary = store.summary()
    assert summary["traces"] == 300
    names = [s.name for s in verdicts[0].stages]
    assert [s["name"] for s in summary["stages"]] == names
    with_ttft = [v for v in verdicts if v.ttft_ms is not None]
    assert len(with_ttft) < len(verdicts)  # some traces have no first token
    for entry in summary["stages"]:
        results = [v.stage(entry["name"]) for v in with_ttft]
        ms = [r.ms for r in results if r.ms is not None]
        assert entry["count"] == len(ms)
        for p in PERCENTILES:
            assert entry[f"p{p}_ms"] == float(np.percentile(ms, p))
        assert entry["max_ms"] == max(ms)
        over = sum(r.status is Status.OVERRUN for r in results if r.ms is not None)
        assert entry["over_limit_share"] == over / len(ms)
    ttfts = [v.ttft_ms for v in verdicts if v.ttft_ms is not None]
    assert summary["ttft"]["p95_ms"] == float(np.percentile(ttfts, 95))
    statuses = [v.status.value for v in verdicts]
    for status, n in summary["status_counts"].items():
        assert n == statuses.count(status)
    network = next(s for s in summary["stages"] if s["name"] == "network")
    assert network["count"] < len(with_ttft)  # server-only traces leave network unmeasured
    store.close()


def test_a_restart_keeps_verdicts_and_a_trace_is_stored_once(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    verdicts = _verdicts(20)
    store = _store(path)
    assert len(store.write([(v, 11) for v in verdicts])) == 20
    store.add_late({verdicts[0].trace_id: 2})
    store.close()
    reopened = _store(path)
    served = reopened.get(verdicts[0].trace_id)
    assert served is not None
    assert served["late_spans"] == 2
    assert served["status"] == verdicts[0].status.value
    assert reopened.write([(verdicts[3], 11)]) == []  # judged once, never re-delivered
    more = _verdicts(5, seed=2)
    assert len(reopened.write([(v, 11) for v in more])) == 5
    newest = reopened.query(limit=3)
    assert [v["trace_id"] for v in newest] == [v.trace_id for v in more[::-1][:3]]
    reopened.close()


def test_a_new_store_has_16_kib_pages_and_a_store_of_4_kib_pages_keeps_its_own(
    tmp_path: Path,
) -> None:
    """New files take the page size the collector's writes were measured fastest with; a
    store made before (SQLite's default, 4 KiB) opens and keeps working as it is."""
    new = _store(tmp_path / "new.db")
    new.write([(v, 11) for v in _verdicts(3)])
    new.close()
    old_path = tmp_path / "old.db"
    with sqlite3.connect(old_path) as old:
        old.execute("PRAGMA page_size=4096")
        old.execute("PRAGMA journal_mode=WAL")
        old.execute("CREATE TABLE IF NOT EXISTS kept (x INTEGER)")
    old_store = _store(old_path)
    verdicts = _verdicts(3, seed=2)
    assert len(old_store.write([(v, 11) for v in verdicts])) == 3
    assert old_store.get(verdicts[0].trace_id) is not None
    old_store.close()
    sizes = {}
    for path in (tmp_path / "new.db", old_path):
        with sqlite3.connect(path) as db:
            sizes[path.name] = db.execute("PRAGMA page_size").fetchone()[0]
    assert sizes == {"new.db": PAGE_SIZE, "old.db": 4096}
    assert PAGE_SIZE == 16384


def test_retention_by_count_and_by_age(tmp_path: Path) -> None:
    store = _store(tmp_path / "v.db", retention_count=50, retention_seconds=3600)
    old_time = datetime.now(UTC) - timedelta(hours=2)
    old = [replace(v, evaluated_at=old_time) for v in _verdicts(30, seed=3)]
    store.write([(v, 11) for v in old])
    new = _verdicts(60, seed=4)
    store.write([(v, 11) for v in new])
    deleted = store.prune(datetime.now(UTC).timestamp())
    assert deleted == 40  # 30 by age, then 10 more by count
    assert store.summary()["traces"] == 50
    assert store.get(old[0].trace_id) is None
    kept_with_ttft = sum(v.ttft_ms is not None for v in new[10:])
    gateway = next(s for s in store.summary()["stages"] if s["name"] == "gateway")
    assert gateway["count"] == kept_with_ttft  # stage rows went with their verdicts
    store.close()


def test_query_filters(tmp_path: Path) -> None:
    store = _store(tmp_path / "v.db")
    first = _verdicts(40, seed=5, run_id="run-a")
    second = _verdicts(40, seed=6, run_id="run-b")
    store.write([(v, 11) for v in first + second])
    only_b = store.query(run_id="run-b", limit=1000)
    assert {v["trace_id"] for v in only_b} == {v.trace_id for v in second}
    overruns = store.query(status=Status.OVERRUN, limit=1000)
    assert {v["trace_id"] for v in overruns} == {
        v.trace_id for v in first + second if v.status is Status.OVERRUN
    }
    blamed = store.query(stage="retrieval", limit=1000)
    assert blamed
    assert {v["trace_id"] for v in blamed} == {
        v.trace_id for v in first + second if "retrieval" in v.blame
    }
    future = datetime.now(UTC).timestamp() + 60
    assert store.query(since=future) == []
    assert store.summary(run_id="run-a")["traces"] == 40
    store.close()


def test_after_a_restart_a_stored_traces_stragglers_are_late_not_judged_again(
    tmp_path: Path,
) -> None:
    spans = rag_trace(trace_id="1" * 32).spans
    with running_collector(tmp_path) as collector:
        assert collector.post(to_request(spans).SerializeToString(), PROTOBUF).status_code == 200
        assert collector.verdict("1" * 32)["late_spans"] == 0
    straggler = replace(spans[4], span_id="f" * 16)
    with running_collector(tmp_path) as collector:
        body = to_request([straggler]).SerializeToString()
        assert collector.post(body, PROTOBUF).status_code == 200
        assert collector.pipeline.core.wait_idle(10)
        assert collector.metric("spanbudget_spans_late_total") == 1
        assert collector.metric("spanbudget_traces_total", budget="rag-ttft", status="ok") == 0
        assert collector.metric("spanbudget_traces_skipped_total") == 0
        assert collector.verdict("1" * 32)["late_spans"] == 1
        assert collector.verdict("1" * 32)["spans"] == len(spans)


def test_recent_trace_ids_are_the_newest_oldest_first(tmp_path: Path) -> None:
    store = _store(tmp_path / "v.db")
    verdicts = _verdicts(5)
    store.write([(v, 11) for v in verdicts])
    assert store.recent_trace_ids(3) == [v.trace_id for v in verdicts[2:]]
    store.close()


@pytest.mark.parametrize("count", [0, 1, 249, 250, 1001])
def test_rows_inserted_many_a_statement_are_the_rows_given(count: int) -> None:
    """Past one statement's 999 parameters too: the rows, in their order, none twice."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (seq INTEGER, name TEXT, ms REAL, status TEXT)")
    rows = [(i, f"stage {i % 7}", None if i % 5 == 0 else i / 3, "ok") for i in range(count)]
    insert_rows(db, "INSERT INTO t VALUES", rows)
    assert db.execute("SELECT * FROM t ORDER BY rowid").fetchall() == rows
