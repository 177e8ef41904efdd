"""The intake journal's cost per accepted request, side by side in one run: the journal
`collect` keeps (append-only segment files, `collector/intake/journal.py`) against the
SQLite journal of the release before it (a row per request body in WAL mode with
`synchronous=OFF`, deleted once its traces were decided), on the same bodies.

Run: .venv/bin/python bench/journal.py [--requests 2000] [--quick]

Each request is a real OTLP protobuf body of 50 reference-path traces (tests/deploy's
traffic, as bench/interop.py sends it, about 60 KB); its traces are decided ten requests
after it arrives, in steps of ten requests, as the judging core's steps settle them. CPU
time of this process (the journal's thread is the caller's), best of 3, per request and
per trace, for the write on the request path and the trim on the judging core's worker.
`--quick` writes a few dozen requests: it checks the bench runs, not its numbers.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console
from rich.table import Table
from spanbudget.collector.intake.journal import Journal, Pending
from spanbudget.collector.intake.otlp import PROTOBUF
from spanbudget.collector.sinks.store import connect

from tests.deploy.traffic import traffic
from tests.support.otlp import to_request

sys.path.insert(0, str(REPO / "bench"))
from bench_summary import record

PER_REQUEST = 50
LAG = 10  # requests between a body's arrival and its traces' decision
STEP = 10  # requests settled a step


class SqliteJournal:
    """The release before's journal, its writes as they were: a row per body in the
    collector's SQLite settings (16 KiB pages, WAL) with `synchronous=OFF`, deleted in
    one `executemany` a step once its traces are decided. Which entries are done is told
    by the same bookkeeping as the journal's own (`Pending`): only the writes differ."""

    def __init__(self, path: Path) -> None:
        self._db = connect(path)
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute(
            "CREATE TABLE entries (seq INTEGER PRIMARY KEY, content_type TEXT,"
            " content_encoding TEXT, body BLOB NOT NULL)"
        )
        self._pending = Pending()  # the bookkeeping both journals share

    def append(
        self,
        body: bytes,
        trace_ids: set[str],
        *,
        content_type: str | None,
        content_encoding: str | None,
    ) -> int:
        cursor = self._db.execute(
            "INSERT INTO entries (content_type, content_encoding, body) VALUES (?,?,?)",
            (content_type, content_encoding, body),
        )
        seq = int(cursor.lastrowid or 0)
        self._pending.add(seq, trace_ids)
        return seq

    def settle(self, trace_ids: list[str]) -> int:
        done = self._pending.decided(trace_ids)
        if done:
            self._db.executemany("DELETE FROM entries WHERE seq = ?", [(seq,) for seq in done])
        return len(done)

    def close(self) -> None:
        self._db.close()


def measure(
    make: Callable[[Path], Journal | SqliteJournal], bodies: list[bytes], ids: list[set[str]]
) -> tuple[float, float]:
    """(append, settle) CPU seconds for every body, best of 3 runs, each on a new file."""
    best_append = best_settle = float("inf")
    for _ in range(3):
        with tempfile.TemporaryDirectory() as tmp:
            journal = make(Path(tmp) / "verdicts.intake")
            appending = settling = 0.0
            for i, (body, trace_ids) in enumerate(zip(bodies, ids, strict=True)):
                began = time.process_time()
                journal.append(body, trace_ids, content_type=PROTOBUF, content_encoding=None)
                appending += time.process_time() - began
                if i >= LAG and (i - LAG) % STEP == STEP - 1:
                    decided = [t for k in range(i - LAG - STEP + 1, i - LAG + 1) for t in ids[k]]
                    began = time.process_time()
                    journal.settle(decided)
                    settling += time.process_time() - began
            rest = [t for k in range(max(0, len(bodies) - LAG - STEP), len(bodies)) for t in ids[k]]
            began = time.process_time()
            journal.settle(rest)
            settling += time.process_time() - began
            journal.close()
        best_append, best_settle = min(best_append, appending), min(best_settle, settling)
    return best_append, best_settle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    count = 40 if args.quick else args.requests
    sent = traffic(PER_REQUEST * min(count, 100), seed=1)
    distinct = [
        to_request([s for trace in sent[i : i + PER_REQUEST] for s in trace.spans])
        for i in range(0, len(sent), PER_REQUEST)
    ]
    bodies = [distinct[i % len(distinct)].SerializeToString() for i in range(count)]
    # Each request's own trace ids (the bodies repeat; their traces, as the journal sees
    # them, do not).
    ids = [{f"{i:016x}{k:016x}" for k in range(PER_REQUEST)} for i in range(count)]
    size = sum(map(len, bodies)) / count
    rows = [
        ("segment files (this release)", measure(Journal, bodies, ids)),
        (
            "SQLite, synchronous=OFF (the release before)",
            measure(lambda p: SqliteJournal(p.with_name(p.name + ".db")), bodies, ids),
        ),
    ]
    table = Table(title=f"{count} requests of {PER_REQUEST} traces, {size / 1000:.0f} KB each")
    for column in ("journal", "write µs/request", "trim µs/request", "µs/trace", "ratio"):
        table.add_column(column, justify="left" if column == "journal" else "right")
    ours = sum(rows[0][1])
    for name, (appending, settling) in rows:
        total = appending + settling
        table.add_row(
            name,
            f"{appending / count * 1e6:,.1f}",
            f"{settling / count * 1e6:,.1f}",
            f"{total / count / PER_REQUEST * 1e6:.2f}",
            f"{total / ours:.2f}×",
        )
    Console(width=120).print(table)
    before = sum(rows[1][1])
    record(
        "journal",
        "intake journal, µs a trace (write and trim)",
        round(ours / count / PER_REQUEST * 1e6, 2),
        "µs/trace",
        aim="less than the SQLite journal's",
        met=ours < before,
    )


if __name__ == "__main__":
    main()
