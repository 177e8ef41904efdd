"""The verdict store: SQLite in WAL mode, retention by age and count, exact summaries;
and `StoreSink`, the judging core's sink that writes into it.

One writer (the collector's worker) and any number of readers (the API); a restart keeps
every verdict within retention.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import json_text
from ..alerts.burnrate import TOTAL
from ..annotations import LOADTEST_RUN_ID
from ..core.decisions import Decisions, Retention
from ..judging.verdict import Status, Verdict, to_json
from ..stats import StageSummary

__all__ = ["PAGE_SIZE", "StoreSink", "VerdictStore", "connect", "insert_rows"]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    seq INTEGER PRIMARY KEY,
    trace_id TEXT NOT NULL UNIQUE,
    budget TEXT NOT NULL,
    status TEXT NOT NULL,
    ttft_ms REAL,
    total_status TEXT NOT NULL,
    run_id TEXT,
    evaluated_at REAL NOT NULL,
    blame TEXT NOT NULL,
    spans INTEGER NOT NULL,
    late_spans INTEGER NOT NULL DEFAULT 0,
    body TEXT NOT NULL,
    revisions INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS verdicts_time ON verdicts (evaluated_at);
CREATE INDEX IF NOT EXISTS verdicts_run ON verdicts (run_id, evaluated_at);
CREATE TABLE IF NOT EXISTS stage_results (
    seq INTEGER NOT NULL,
    stage TEXT NOT NULL,
    ms REAL,
    status TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS stage_results_seq ON stage_results (seq);
"""


# 16 KiB pages, not SQLite's 4 KiB: the collector writes whole request bodies (the journal),
# compressed traces and verdicts, each commit a WAL frame per page. Measured here on 100 KB
# journal entries: 195 µs of CPU an entry at 4 KiB, 135 at 16 KiB, 280 at 64 KiB.
PAGE_SIZE = 16384


def connect(path: Path) -> sqlite3.Connection:
    """A connection to one of the collector's SQLite files (verdicts, spans): WAL, so the
    API reads while the worker writes; autocommit; any thread; a wait when locked."""
    connection = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    connection.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a new file's; an old keeps its own
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute("PRAGMA busy_timeout=5000")
    return connection


_INSERT_VERDICT = (
    "INSERT INTO verdicts (seq, trace_id, budget, status, ttft_ms, total_status, run_id,"
    " evaluated_at, blame, spans, body) VALUES"
)
# SQLite's least bound on a statement's parameters (SQLITE_MAX_VARIABLE_NUMBER before 3.32).
_MAX_PARAMETERS = 999


def insert_rows(
    connection: sqlite3.Connection, insert: str, rows: Sequence[tuple[Any, ...]]
) -> None:
    """`insert` ("INSERT INTO t (...) VALUES") of `rows`, all of one width, many rows a
    statement: SQLite runs one statement of 200 rows in half the time of 200 of one row
    each (`executemany`), which is what the stage rows cost the verdict store's writes."""
    if not rows:
        return
    width = len(rows[0])
    per = max(1, _MAX_PARAMETERS // width)
    row = "(" + ",".join("?" * width) + ")"
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        values = [value for one in chunk for value in one]
        connection.execute(f"{insert} {','.join([row] * len(chunk))}", values)


class VerdictStore:
    """Verdicts by trace id, newest first listings, per-stage summaries.

    `write` is for the single writer thread; `get`, `query` and `summary` may be called
    from any thread (they share one read connection under a lock; WAL keeps them off the
    writer's way).
    """

    def __init__(self, path: Path, *, retention_seconds: float, retention_count: int) -> None:
        self.path = path
        self.retention_seconds = retention_seconds
        self.retention_count = retention_count
        if str(path) != ":memory:":
            path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = connect(self.path)
        self._writer.executescript(_SCHEMA)
        columns = {row[1] for row in self._writer.execute("PRAGMA table_info(verdicts)")}
        if "revisions" not in columns:  # a store from before revisions
            self._writer.execute(
                "ALTER TABLE verdicts ADD COLUMN revisions INTEGER NOT NULL DEFAULT 0"
            )
        self._reader = connect(self.path)
        self._read_lock = threading.Lock()
        row = self._writer.execute("SELECT COALESCE(MAX(seq), 0) FROM verdicts").fetchone()
        self._next_seq = int(row[0]) + 1

    def close(self) -> None:
        self._writer.close()
        with self._read_lock:
            self._reader.close()

    def write(self, verdicts: Sequence[tuple[Verdict, int]]) -> list[Verdict]:
        """Store `(verdict, span count)` pairs in one transaction; return the new ones.

        A trace id already stored is left as it is: a trace is judged once.
        """
        if not verdicts:
            return []
        writer = self._writer
        known = self.known([v.trace_id for v, _ in verdicts])
        fresh: list[Verdict] = []
        counts: list[int] = []
        for verdict, span_count in verdicts:
            if verdict.trace_id not in known:
                known.add(verdict.trace_id)
                fresh.append(verdict)
                counts.append(span_count)
        verdict_rows: list[tuple[Any, ...]] = []
        stage_rows: list[tuple[Any, ...]] = []
        # A batch's verdicts share their instant and a few blames: each is converted once.
        instants: dict[datetime, float] = {}
        blames: dict[tuple[str, ...], str] = {}
        for verdict, span_count, body in zip(fresh, counts, to_json(fresh), strict=True):
            seq = self._next_seq
            self._next_seq += 1
            run_id = verdict.attributes.get(LOADTEST_RUN_ID)
            at = instants.get(verdict.evaluated_at)
            if at is None:
                at = instants[verdict.evaluated_at] = verdict.evaluated_at.timestamp()
            blame = blames.get(verdict.blame)
            if blame is None:
                blame = blames[verdict.blame] = json_text.dumps(list(verdict.blame)).decode()
            verdict_rows.append(
                (
                    seq,
                    verdict.trace_id,
                    verdict.budget,
                    verdict.status._value_,
                    verdict.ttft_ms,
                    verdict.total_status._value_,
                    None if run_id is None else str(run_id),
                    at,
                    blame,
                    span_count,
                    body,
                )
            )
            stage_rows.extend((seq, s.name, s.ms, s.status._value_) for s in verdict.stages)
        writer.execute("BEGIN")
        try:
            insert_rows(writer, _INSERT_VERDICT, verdict_rows)
            insert_rows(writer, "INSERT INTO stage_results VALUES", stage_rows)
            writer.execute("COMMIT")
        except BaseException:
            writer.execute("ROLLBACK")
            raise
        return fresh

    def revise(self, verdicts: Sequence[tuple[Verdict, int]]) -> int:
        """Replace stored verdicts by their revisions (judged again with late spans);
        `revisions` counts how often. A trace not stored (retention took it) is left out.
        Returns how many were replaced."""
        writer = self._writer
        replaced = 0
        writer.execute("BEGIN")
        try:
            for (verdict, span_count), body in zip(
                verdicts, to_json(v for v, _ in verdicts), strict=True
            ):
                row = writer.execute(
                    "UPDATE verdicts SET status = ?, ttft_ms = ?, total_status = ?, blame = ?,"
                    " spans = ?, body = ?, revisions = revisions + 1 WHERE trace_id = ?"
                    " RETURNING seq",
                    (
                        verdict.status.value,
                        verdict.ttft_ms,
                        verdict.total_status.value,
                        json_text.dumps(list(verdict.blame)).decode(),
                        span_count,
                        body,
                        verdict.trace_id,
                    ),
                ).fetchone()
                if row is None:
                    continue
                seq = row[0]
                writer.execute("DELETE FROM stage_results WHERE seq = ?", (seq,))
                writer.executemany(
                    "INSERT INTO stage_results VALUES (?,?,?,?)",
                    [(seq, s.name, s.ms, s.status.value) for s in verdict.stages],
                )
                replaced += 1
            writer.execute("COMMIT")
        except BaseException:
            writer.execute("ROLLBACK")
            raise
        return replaced

    def add_late(self, counts: dict[str, int]) -> None:
        """Attach late spans to their stored trace (a count; they never change the verdict)."""
        self._writer.executemany(
            "UPDATE verdicts SET late_spans = late_spans + ? WHERE trace_id = ?",
            [(n, trace_id) for trace_id, n in counts.items()],
        )

    def known(self, trace_ids: Collection[str]) -> set[str]:
        """Those of `trace_ids` that have a stored verdict."""
        found: set[str] = set()
        for chunk in _chunks(list(trace_ids), 500):
            marks = ",".join("?" * len(chunk))
            rows = self._writer.execute(
                f"SELECT trace_id FROM verdicts WHERE trace_id IN ({marks})", chunk
            )
            found.update(row[0] for row in rows)
        return found

    def recent_trace_ids(self, limit: int) -> list[str]:
        """The `limit` most recently stored trace ids, oldest first."""
        rows = self._writer.execute(
            "SELECT trace_id FROM verdicts ORDER BY seq DESC LIMIT ?", (limit,)
        ).fetchall()
        return [row[0] for row in reversed(rows)]

    def recent_statuses(self, limit: int) -> list[tuple[str, str]]:
        """(trace id, verdict status) of the `limit` most recently stored, oldest first."""
        rows = self._writer.execute(
            "SELECT trace_id, status FROM verdicts ORDER BY seq DESC LIMIT ?", (limit,)
        ).fetchall()
        return [(row[0], row[1]) for row in reversed(rows)]

    def judged_since(self, since: float, budget: str) -> list[tuple[float, str, frozenset[str]]]:
        """(evaluated at, trace id, what went over its limit: stage names and `total`) of
        the verdicts of `budget` judged at or after `since`, oldest first: what the alert
        rules' windows saw, for a restart to see it again (not a damaged trace's, nor one
        outside the SLO: `AlertEngine.on_verdicts` leaves those out too)."""
        outside = [s.value for s in Status if not s.in_slo]
        rows = self._writer.execute(
            "SELECT seq, evaluated_at, trace_id, total_status FROM verdicts"
            " WHERE budget = ? AND evaluated_at >= ?"
            f" AND status NOT IN ({', '.join('?' for _ in outside)})"
            " AND json_extract(body, '$.damaged') IS NULL ORDER BY seq",
            (budget, since, *outside),
        ).fetchall()
        if not rows:
            return []
        over: dict[int, set[str]] = {}
        for seq, stage in self._writer.execute(
            "SELECT seq, stage FROM stage_results WHERE seq >= ? AND status = ?",
            (rows[0][0], Status.OVERRUN.value),
        ):
            over.setdefault(seq, set()).add(stage)
        out = []
        for seq, at, trace_id, total_status in rows:
            names = over.get(seq, set())
            if total_status == Status.OVERRUN.value:
                names = names | {TOTAL}
            out.append((at, trace_id, frozenset(names)))
        return out

    def prune(self, now: float) -> int:
        """Apply retention: drop verdicts older than the age limit and beyond the count."""
        writer = self._writer
        cutoff = now - self.retention_seconds
        writer.execute("BEGIN")
        try:
            row = writer.execute(
                "SELECT MAX(seq) FROM verdicts WHERE evaluated_at < ?", (cutoff,)
            ).fetchone()
            by_age = row[0] or 0
            newest = writer.execute("SELECT COALESCE(MAX(seq), 0) FROM verdicts").fetchone()[0]
            up_to = max(by_age, newest - self.retention_count)
            deleted = writer.execute("DELETE FROM verdicts WHERE seq <= ?", (up_to,)).rowcount
            writer.execute("DELETE FROM stage_results WHERE seq <= ?", (up_to,))
            writer.execute("COMMIT")
        except BaseException:
            writer.execute("ROLLBACK")
            raise
        return int(deleted)

    def get(self, trace_id: str) -> dict[str, Any] | None:
        with self._read_lock:
            row = self._reader.execute(
                "SELECT body, spans, late_spans, revisions FROM verdicts WHERE trace_id = ?",
                (trace_id,),
            ).fetchone()
        return None if row is None else _served(row)

    def query(
        self,
        *,
        status: Status | None = None,
        stage: str | None = None,
        run_id: str | None = None,
        since: float | None = None,
        before: str | None = None,
        budget: str | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Verdicts newest first; `stage` keeps verdicts that blame that stage; `before` (a
        trace id) starts after that verdict, to page through a long listing; `budget`, those
        that budget judged."""
        where, params = _filters(since, run_id, budget)
        if before is not None:
            where.append("seq < (SELECT seq FROM verdicts WHERE trace_id = ?)")
            params.append(before)
        if status is not None:
            where.append("status = ?")
            params.append(status.value)
        if stage is not None:
            where.append("EXISTS (SELECT 1 FROM json_each(verdicts.blame) WHERE value = ?)")
            params.append(stage)
        sql = "SELECT body, spans, late_spans, revisions FROM verdicts"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY seq DESC LIMIT ?"
        with self._read_lock:
            rows = self._reader.execute(sql, [*params, limit]).fetchall()
        return [_served(row) for row in rows]

    def summary(
        self, *, since: float | None = None, run_id: str | None = None, budget: str | None = None
    ) -> dict[str, Any]:
        """Per stage and for TTFT: count, p50/p90/p95/p99/max, share over limit; statuses.
        With `budget`, only the verdicts that budget judged: stages of one name in two
        budgets are pooled otherwise.

        Stage figures come from traces with a TTFT (not `incomplete` ones); status counts
        cover every verdict.
        """
        where, params = _filters(since, run_id, budget)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        with self._read_lock:
            statuses = self._reader.execute(
                f"SELECT status, COUNT(*) FROM verdicts{clause} GROUP BY status", params
            ).fetchall()
            ttfts = self._reader.execute(
                f"SELECT ttft_ms, total_status FROM verdicts{clause}", params
            ).fetchall()
            # Stage times of traces without a first token cover the whole root span, not
            # the TTFT window: they would skew the percentiles, so only judged TTFTs count.
            stage_rows = self._reader.execute(
                "SELECT s.stage, s.ms, s.status FROM stage_results s JOIN verdicts"
                " ON verdicts.seq = s.seq WHERE verdicts.ttft_ms IS NOT NULL"
                + "".join(f" AND {w}" for w in where)
                + " ORDER BY s.rowid",
                params,
            ).fetchall()
        stages: dict[str, list[tuple[float | None, Status]]] = {}
        for name, ms, stage_status in stage_rows:
            stages.setdefault(name, []).append((ms, Status(stage_status)))
        counts = {status.value: 0 for status in Status if status.severity or status is Status.OK}
        counts.update(dict(statuses))
        ttft = StageSummary.of((ms, Status(status)) for ms, status in ttfts)
        return {
            "traces": sum(n for _, n in statuses),
            "status_counts": counts,
            "ttft": ttft.to_dict(),
            "stages": [
                {"name": name, **StageSummary.of(results).to_dict()}
                for name, results in stages.items()
            ],
            "percentile_method": "linear interpolation between closest ranks (numpy default)",
        }


def _filters(
    since: float | None, run_id: str | None, budget: str | None = None
) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if since is not None:
        where.append("evaluated_at >= ?")
        params.append(since)
    if run_id is not None:
        where.append("run_id = ?")
        params.append(run_id)
    if budget is not None:
        where.append("budget = ?")
        params.append(budget)
    return where, params


def _served(row: tuple[Any, ...]) -> dict[str, Any]:
    """A stored verdict as the API serves it: its JSON, the spans it was judged from, the
    late spans counted since, and, when late spans made it judged again, how often."""
    body: dict[str, Any] = json.loads(row[0])
    body["spans"] = row[1]
    body["late_spans"] = row[2]
    if len(row) > 3 and row[3]:
        body["revisions"] = row[3]
    return body


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class StoreSink:
    """The verdict store as a sink of the judging core: judged verdicts are written (with
    their span counts), late spans counted against their stored trace, and retention
    applied once a minute. Closing the sink closes the store."""

    name = "store"

    def __init__(
        self,
        store: VerdictStore,
        *,
        prune_every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._retention = Retention(store.prune, prune_every_s, clock)

    def consume(self, decisions: Decisions) -> None:
        judged = [
            (trace.judged.verdict, len(trace.spans))
            for trace in decisions.traces
            if trace.judged is not None
        ]
        self.store.write(judged)
        if decisions.revised:
            self.store.revise(
                [(t.judged.verdict, len(t.spans)) for t in decisions.revised if t.judged]
            )
        if decisions.late:
            late: dict[str, int] = {}
            for held in decisions.late:
                late[held.span.trace_id] = late.get(held.span.trace_id, 0) + 1
            self.store.add_late(late)
        self._retention.tick()

    def close(self) -> None:
        self.store.close()
