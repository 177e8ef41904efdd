"""The intake journal on its files: what was written and not done comes back at the next
start (the process killed, nothing closed), whole, in order; what is done, refused or
decided before its write does not; segments roll and go; a tail a power loss cut short,
a garbled segment and an earlier release's SQLite journal are each dealt with as the
module says."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spanbudget.collector.intake.journal import Journal
from spanbudget.collector.intake.otlp import PROTOBUF


def files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def given_back(path: Path) -> list[tuple[int, str | None, str | None, bytes]]:
    """What a new start reads back (the journal of the killed process left as it was)."""
    again = Journal(path)
    try:
        return [(e.seq, e.content_type, e.content_encoding, e.body) for e in again.entries()]
    finally:
        again.close()


def test_entries_not_done_come_back_whole_and_in_order_after_a_kill(tmp_path: Path) -> None:
    path = tmp_path / "v.intake"
    journal = Journal(path)  # never closed: as a killed process leaves it
    a = journal.append(b"\x00a" * 500, {"t1", "t2"}, content_type=PROTOBUF, content_encoding=None)
    b = journal.append(b"b", {"t3"}, content_type=PROTOBUF, content_encoding="gzip")
    c = journal.append(b"", {"t4"}, content_type=None, content_encoding=None)
    assert journal.settle(["t1"]) == 0  # t2 is still to decide
    assert journal.settle(["t3"]) == 1
    assert len(journal) == 2
    assert given_back(path) == [
        (a, PROTOBUF, None, b"\x00a" * 500),
        (c, None, None, b""),
    ]
    assert b not in {seq for seq, *_ in given_back(path)}


def test_entries_read_back_are_tracked_again_and_done_as_any_other(tmp_path: Path) -> None:
    path = tmp_path / "v.intake"
    first = Journal(path)
    first.append(b"one", {"t1"}, content_type=PROTOBUF, content_encoding=None)
    first.append(b"two", {"t2"}, content_type=PROTOBUF, content_encoding=None)
    second = Journal(path)
    one, two = second.entries()
    second.track(one.seq, set())  # its traces were judged before the restart: done
    second.track(two.seq, {"t2"})
    later = second.append(b"three", {"t3"}, content_type=PROTOBUF, content_encoding=None)
    assert later > two.seq  # numbers go on from the last start's
    assert [seq for seq, *_ in given_back(path)] == [two.seq, later]
    second.settle(["t2", "t3"])
    assert files(path) == []  # every segment's entries done: both gone
    assert given_back(path) == []


def test_a_refused_body_and_one_decided_before_its_write_are_never_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v.intake"
    journal = Journal(path)
    refused = journal.register({"t1"})
    journal.cancel(refused)  # the core had no room: the client sends it again
    journal.write(refused, b"x", content_type=PROTOBUF, content_encoding=None)
    fast = journal.register({"t2"})
    assert journal.settle(["t2"]) == 1  # the core decided it before the write
    journal.write(fast, b"y", content_type=PROTOBUF, content_encoding=None)
    assert files(path) == []
    assert len(journal) == 0


def test_segments_roll_at_their_size_and_each_goes_with_its_last_entry(tmp_path: Path) -> None:
    path = tmp_path / "v.intake"
    journal = Journal(path, segment_bytes=1000)
    body = b"z" * 400
    seqs = [
        journal.append(body, {f"t{i}"}, content_type=PROTOBUF, content_encoding=None)
        for i in range(5)
    ]
    logs = [name for name in files(path) if name.endswith(".log")]
    assert len(logs) == 3  # two entries a segment
    journal.settle(["t0"])
    assert len([n for n in files(path) if n.endswith(".done")]) == 1
    journal.settle(["t1", "t3"])
    assert len([n for n in files(path) if n.endswith(".log")]) == 2  # the first went
    assert [seq for seq, *_ in given_back(path)] == [seqs[2], seqs[4]]
    journal.settle(["t2", "t4"])
    assert files(path) == []


def test_a_tail_cut_short_is_left_out_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A power loss (never a kill: the kernel has each write whole) can leave an entry, or
    a done mark, cut short: the entries before it come back."""
    path = tmp_path / "v.intake"
    journal = Journal(path)
    kept = journal.append(b"k" * 100, {"t1"}, content_type=PROTOBUF, content_encoding=None)
    journal.append(b"c" * 100, {"t2"}, content_type=PROTOBUF, content_encoding=None)
    journal.append(b"d" * 100, {"t3"}, content_type=PROTOBUF, content_encoding=None)
    journal.settle(["t3"])
    (segment,) = path.glob("*.log")
    segment.write_bytes(segment.read_bytes()[:-150])  # into the second entry
    (marks,) = path.glob("*.done")
    marks.write_bytes(marks.read_bytes()[:-3])  # the third's mark cut short: not made
    with caplog.at_level(logging.WARNING):
        assert given_back(path) == [(kept, PROTOBUF, None, b"k" * 100)]
    assert "not whole" in caplog.text


def test_an_entry_whose_bytes_a_power_loss_zeroed_is_left_out(tmp_path: Path) -> None:
    """The file as long as written, its last entry's bytes zeros (the data never reached
    the disk, the size did): its trailer does not agree, so it is not whole."""
    path = tmp_path / "v.intake"
    journal = Journal(path)
    kept = journal.append(b"k" * 100, {"t1"}, content_type=PROTOBUF, content_encoding=None)
    journal.append(b"z" * 100, {"t2"}, content_type=PROTOBUF, content_encoding=None)
    (segment,) = path.glob("*.log")
    data = segment.read_bytes()
    segment.write_bytes(data[:-20] + bytes(20))
    assert [seq for seq, *_ in given_back(path)] == [kept]


def test_done_marks_left_behind_never_mark_a_new_segments_entries(tmp_path: Path) -> None:
    """A segment's marks outlived it (deleted first, the process killed before the
    segment): a new segment of the same name starts with none."""
    path = tmp_path / "v.intake"
    path.mkdir()
    (path / "0000000000000001.done").write_bytes((1).to_bytes(8, "little"))
    journal = Journal(path)
    seq = journal.append(b"new", {"t1"}, content_type=PROTOBUF, content_encoding=None)
    assert seq == 1
    assert [body for *_, body in given_back(path)] == [b"new"]


def test_a_garbled_segment_is_set_aside_and_the_journal_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "v.intake"
    path.mkdir()
    (path / "0000000000000007.log").write_bytes(bytes(range(256)) * 4)
    with caplog.at_level(logging.WARNING):
        journal = Journal(path)
    (aside,) = path.glob("0000000000000007.log.unreadable-*")
    assert "unreadable" in caplog.text
    assert str(aside) in caplog.text
    assert list(journal.entries()) == []
    seq = journal.append(b"body", {"t1"}, content_type=PROTOBUF, content_encoding=None)
    assert [(s, body) for s, _, _, body in given_back(path)] == [(seq, b"body")]


def test_an_earlier_releases_sqlite_journal_is_taken_over_then_removed(tmp_path: Path) -> None:
    legacy = tmp_path / "v.intake.db"
    with sqlite3.connect(legacy) as db:
        db.execute(
            "CREATE TABLE entries (seq INTEGER PRIMARY KEY, content_type TEXT,"
            " content_encoding TEXT, body BLOB NOT NULL)"
        )
        db.executemany(
            "INSERT INTO entries VALUES (?,?,?,?)",
            [(4, PROTOBUF, None, b"first"), (9, PROTOBUF, "gzip", b"second")],
        )
    db.close()
    journal = Journal(tmp_path / "v.intake")
    taken = list(journal.entries())
    assert [(e.content_type, e.content_encoding, e.body) for e in taken] == [
        (PROTOBUF, None, b"first"),
        (PROTOBUF, "gzip", b"second"),
    ]
    assert not legacy.exists()
    journal.track(taken[0].seq, {"t1"})
    journal.track(taken[1].seq, set())
    assert [body for *_, body in given_back(tmp_path / "v.intake")] == [b"first"]


def test_a_garbled_sqlite_journal_is_set_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    legacy = tmp_path / "v.intake.db"
    legacy.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)
    with caplog.at_level(logging.WARNING):
        journal = Journal(tmp_path / "v.intake")
    (aside,) = tmp_path.glob("v.intake.db.unreadable-*")
    assert aside.read_bytes().startswith(b"SQLite format 3\x00")
    assert "unreadable" in caplog.text
    assert list(journal.entries()) == []


# A journal's life: bodies registered and written (or refused), traces decided, restarts
# that read back and track again. A model says what each restart must give back.
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sets(st.integers(0, 7), min_size=1, max_size=3)),
        st.tuples(st.just("refuse"), st.sets(st.integers(0, 7), min_size=1, max_size=3)),
        st.tuples(st.just("settle"), st.sets(st.integers(0, 7), max_size=4)),
        st.tuples(st.just("restart"), st.sets(st.integers(0, 7), max_size=4)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=_OPS, segment_bytes=st.sampled_from([60, 200, 1 << 20]))
def test_a_restart_gives_back_exactly_the_entries_written_and_not_done(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, set[int]]], segment_bytes: int
) -> None:
    path = tmp_path_factory.mktemp("journal") / "v.intake"
    journal = Journal(path, segment_bytes=segment_bytes)
    pending: dict[int, set[str]] = {}  # the model: entry -> its traces not decided
    bodies: dict[int, bytes] = {}
    for op, traces in ops:
        names = {f"t{t}" for t in traces}
        if op == "append":
            seq = journal.register(names)
            body = f"body {seq}".encode() * (seq % 5)
            journal.write(seq, body, content_type=PROTOBUF, content_encoding=None)
            pending[seq], bodies[seq] = set(names), body
        elif op == "refuse":
            journal.cancel(journal.register(names))
        elif op == "settle":
            journal.settle(names)
            for seq in list(pending):
                pending[seq] -= names
                if not pending[seq]:
                    del pending[seq]
        else:  # killed and started again: what is back is what the model holds
            journal = Journal(path, segment_bytes=segment_bytes)
            back = list(journal.entries())
            assert [(e.seq, e.body) for e in back] == [(s, bodies[s]) for s in sorted(pending)]
            for entry in back:  # the judged ones (`names`) leave their entries
                pending[entry.seq] -= names
                journal.track(entry.seq, pending[entry.seq])
                if not pending[entry.seq]:
                    del pending[entry.seq]
        assert len(journal) == len(pending)
    if not pending:
        assert not list(path.glob("*.log"))
    assert [seq for seq, *_ in given_back(path)] == sorted(pending)
