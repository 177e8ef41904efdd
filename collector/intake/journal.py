"""The durable intake: what the collector acknowledged survives `kill -9`.

Every accepted `POST /v1/traces` body (or OTLP/gRPC message) is written to a journal
before the answer goes out, with the trace ids it holds. An entry is done once every one
of its traces is decided — judged and stored, skipped or dropped — or met as late spans of
a trace decided before. At start, the entries not done (what the last process had
acknowledged and not yet decided) are decoded and offered again, before any new request
is served; the spans of traces the verdict store already holds are left out, so nothing
is judged twice and a trace whose spans straddle the restart is judged whole.

The journal is a directory of append-only segment files (`<first entry>.log`), each entry
written whole by one `writev` (a header, the body, the entry's number again as a
trailer), beside a `.done` file per segment listing the entries done. A segment whose
entries are all done is deleted, both files; the next entry opens a new one. No entry is
ever rewritten or deleted alone: a 60 KB entry costs one write of its bytes, where SQLite
(the journal before) wrote its pages to the WAL, then to the database at each
checkpoint, and freed them again when it was trimmed: 200 µs of CPU an entry against 24
here (`bench/journal.py`).

An entry is registered (its traces counted as pending) before its spans are offered to
the core, and written only once the core took them: a body the core refuses costs no
write, and one whose traces were all decided before the write (a fast core) needs none.

Durability: an entry is in the kernel's page cache before the answer. It survives the
process being killed, not the machine losing power: the journal never waits for the disk
(no fsync). A power loss can leave a segment's tail garbled: reading stops at the first
entry that is not whole (its trailer is the check), with a warning, and a segment that
does not start as one is set aside (renamed `*.unreadable-<time>`). The forwarder's queue
is not in the journal: spans waiting to go downstream when the process dies are lost (the
verdicts are not).

A journal left by an earlier release (`<db stem>.intake.db`, SQLite) is read once at
start, its entries copied into the new journal, and removed.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from ..core.decisions import Decisions

__all__ = ["SEGMENT_BYTES", "Entry", "Journal", "JournalSink", "Pending"]

log = logging.getLogger(__name__)

# A segment takes entries until it holds this many bytes; a busy collector then opens
# one about every second, and a segment goes once its last entry is done.
SEGMENT_BYTES = 8 << 20
_MAGIC = b"SBJ1"  # a segment's first bytes: the format
# An entry: its number, the lengths of its content type, content encoding and body; then
# those three; then its number again (whole only if the trailer is there and agrees).
_HEAD = struct.Struct("<QHHI")
_TRAILER = struct.Struct("<Q")
_DONE = struct.Struct("<Q")  # a `.done` file: the numbers of the entries done


class Entry(NamedTuple):
    seq: int
    content_type: str | None
    content_encoding: str | None
    body: bytes


class Pending:
    """Which entries still have traces to decide, and which entries hold a trace: what
    tells the journal that an entry is done. Not thread-safe: the journal's lock covers it."""

    def __init__(self) -> None:
        self._left: dict[int, set[str]] = {}  # entry -> its traces not decided yet
        self._by_trace: dict[str, set[int]] = {}  # trace id -> entries holding it

    def __len__(self) -> int:
        return len(self._left)

    def __contains__(self, seq: int) -> bool:
        return seq in self._left

    def add(self, seq: int, trace_ids: Collection[str]) -> None:
        self._left[seq] = set(trace_ids)
        for trace_id in trace_ids:
            self._by_trace.setdefault(trace_id, set()).add(seq)

    def drop(self, seq: int) -> None:
        """Forget an entry, whatever it had left."""
        for trace_id in self._left.pop(seq, ()):
            entries = self._by_trace.get(trace_id)
            if entries is not None:
                entries.discard(seq)
                if not entries:
                    del self._by_trace[trace_id]

    def decided(self, trace_ids: Iterable[str]) -> list[int]:
        """These traces are decided: the entries left with none to decide, now done."""
        done: list[int] = []
        for trace_id in trace_ids:
            for seq in self._by_trace.pop(trace_id, ()):
                left = self._left.get(seq)
                if left is None:
                    continue
                left.discard(trace_id)
                if not left:
                    del self._left[seq]
                    done.append(seq)
        return done


class Journal:
    """Accepted request bodies until their traces are decided.

    `register`, `write`, `cancel` and `append` run on the request path (any thread),
    `settle` on the judging core's worker; one lock orders them, so an entry is counted
    before the core can decide any of its traces.
    """

    def __init__(self, path: Path, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.path = path
        self.segment_bytes = segment_bytes
        path.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._pending = Pending()
        self._segment_of: dict[int, int] = {}  # written entry not done -> its segment
        self._live: dict[int, int] = {}  # segment -> its entries not done
        self._found: list[tuple[int, Entry]] = []  # (segment, entry) read at start
        self._current: int | None = None  # the segment written to, by its first entry
        self._fd = -1
        self._size = 0
        self._read_all()
        self._next_seq = 1 + max((entry.seq for _, entry in self._found), default=0)
        legacy = path.with_name(f"{path.name}.db")
        if legacy.exists():
            self._take_legacy(legacy)

    def __len__(self) -> int:
        """Entries not done."""
        with self._lock:
            return len(self._pending)

    def register(self, trace_ids: Collection[str]) -> int:
        """Count a body's traces as pending, before its spans are offered; its entry number
        (for `write`, or `cancel` when the core refused the spans)."""
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            self._pending.add(seq, trace_ids)
        return seq

    def write(
        self, seq: int, body: bytes, *, content_type: str | None, content_encoding: str | None
    ) -> None:
        """Write a registered entry; none is written when its traces are all decided by
        now (nothing of it would be offered again)."""
        with self._lock:
            if seq in self._pending:
                self._write(seq, body, content_type, content_encoding)

    def append(
        self,
        body: bytes,
        trace_ids: Collection[str],
        *,
        content_type: str | None,
        content_encoding: str | None,
    ) -> int:
        """`register` and `write` at once; the entry number."""
        seq = self.register(trace_ids)
        self.write(seq, body, content_type=content_type, content_encoding=content_encoding)
        return seq

    def cancel(self, seq: int) -> None:
        """Forget a registered entry whose spans the core refused (the client sends it
        again); it must not have been written."""
        with self._lock:
            self._pending.drop(seq)

    def track(self, seq: int, trace_ids: Collection[str]) -> None:
        """Register an entry read back at start (`entries`) with the traces still to decide;
        with none, it is done."""
        with self._lock:
            if trace_ids:
                self._pending.add(seq, trace_ids)
            else:
                self._done([seq])

    def settle(self, trace_ids: Iterable[str]) -> int:
        """These traces are decided (or met late): the entries left with none to decide are
        done. Returns how many."""
        with self._lock:
            done = self._pending.decided(trace_ids)
            if done:
                self._done(done)
        return len(done)

    def entries(self) -> Iterator[Entry]:
        """Every entry from before this start that is not done, oldest first (at start,
        before new entries are written); each must then be `track`ed."""
        with self._lock:
            found, self._found = self._found, []
            for segment, entry in found:
                self._segment_of[entry.seq] = segment
        for _, entry in found:
            yield entry

    def close(self) -> None:
        with self._lock:
            self._close_segment()

    # -- on disk ------------------------------------------------------------------------

    def _write(
        self, seq: int, body: bytes, content_type: str | None, content_encoding: str | None
    ) -> None:
        ctype = (content_type or "").encode()
        cenc = (content_encoding or "").encode()
        size = _HEAD.size + len(ctype) + len(cenc) + len(body) + _TRAILER.size
        if self._current is None or self._size + size > self.segment_bytes:
            self._open_segment(seq)
        assert self._current is not None
        head = _HEAD.pack(seq, len(ctype), len(cenc), len(body))
        _write_all(self._fd, [head, ctype, cenc, body, _TRAILER.pack(seq)], size)
        self._size += size
        self._segment_of[seq] = self._current
        self._live[self._current] = self._live.get(self._current, 0) + 1

    def _open_segment(self, first: int) -> None:
        self._close_segment()
        self._done_path(first).unlink(missing_ok=True)
        self._current = first
        self._fd = os.open(self._log(first), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        _write_all(self._fd, [_MAGIC], len(_MAGIC))
        self._size = len(_MAGIC)

    def _close_segment(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        current, self._current = self._current, None
        if current is not None and not self._live.get(current):
            self._delete(current)

    def _done(self, seqs: list[int]) -> None:
        """Mark entries done in their segments' `.done` files; delete the segments left
        with none to decide (the current one too: the next entry opens another)."""
        by_segment: dict[int, list[int]] = {}
        for seq in seqs:
            segment = self._segment_of.pop(seq, None)
            if segment is not None:  # else never written: nothing on disk to mark
                by_segment.setdefault(segment, []).append(seq)
        for segment, done in by_segment.items():
            left = self._live.get(segment, 0) - len(done)
            if left > 0:
                self._live[segment] = left
                with open(self._done_path(segment), "ab") as marks:
                    marks.write(b"".join(_DONE.pack(seq) for seq in done))
                continue
            self._live.pop(segment, None)
            if segment == self._current:
                os.close(self._fd)
                self._fd, self._current = -1, None
            self._delete(segment)

    def _delete(self, segment: int) -> None:
        # The marks first: a segment left without them is only read again in vain (its
        # traces are judged), while marks left without their segment could mark a later
        # segment's entries, were its name the same (`_open_segment` removes them too).
        for path in (self._done_path(segment), self._log(segment)):
            path.unlink(missing_ok=True)

    def _log(self, segment: int) -> Path:
        return self.path / f"{segment:016d}.log"

    def _done_path(self, segment: int) -> Path:
        return self.path / f"{segment:016d}.done"

    def _read_all(self) -> None:
        """What earlier processes left: each segment's entries not done, counted live."""
        for log_path in sorted(self.path.glob("*.log")):
            segment = int(log_path.stem)
            entries = self._read_segment(log_path)
            done = _read_done(self._done_path(segment))
            left = [entry for entry in entries if entry.seq not in done]
            if not left:
                self._delete(segment)
                continue
            self._live[segment] = len(left)
            self._found.extend((segment, entry) for entry in left)
        self._found.sort(key=lambda found: found[1].seq)

    def _read_segment(self, log_path: Path) -> list[Entry]:
        data = log_path.read_bytes()
        if not data.startswith(_MAGIC):
            aside = _set_aside(log_path)
            log.warning("intake journal segment %s unreadable: set aside as %s", log_path, aside)
            return []
        entries, end = _parse(data, len(_MAGIC))
        if end < len(data):
            log.warning(
                "intake journal segment %s: %d byte(s) after entry %s not whole (a power loss"
                " or a write cut short, never acknowledged): left out",
                log_path,
                len(data) - end,
                entries[-1].seq if entries else "none",
            )
        return entries

    def _take_legacy(self, legacy: Path) -> None:
        """Copy the entries of an earlier release's SQLite journal into a segment of this
        one, to be offered again as this journal's own; then remove it (one that cannot be
        read is set aside instead)."""
        try:
            db = sqlite3.connect(legacy)
            try:
                rows = db.execute(
                    "SELECT content_type, content_encoding, body FROM entries ORDER BY seq"
                ).fetchall()
            finally:
                db.close()
        except sqlite3.DatabaseError as exc:
            aside = _set_aside(legacy)
            log.warning("intake journal %s unreadable (%s): set aside as %s", legacy, exc, aside)
            return
        with self._lock:
            for content_type, content_encoding, body in rows:
                seq = self._next_seq
                self._next_seq += 1
                self._write(seq, bytes(body), content_type, content_encoding)
                segment = self._segment_of[seq]
                self._found.append((segment, Entry(seq, content_type, content_encoding, body)))
            self._close_segment()
        for suffix in ("", "-wal", "-shm"):
            legacy.with_name(legacy.name + suffix).unlink(missing_ok=True)
        if rows:
            log.warning("intake journal: %d entries taken over from %s", len(rows), legacy)


def _write_all(fd: int, parts: list[bytes], size: int) -> None:
    """Write `parts` at the end of the file, whole (`writev` may write less than asked)."""
    written = os.writev(fd, parts)
    if written < size:
        rest = b"".join(parts)[written:]
        while rest:
            rest = rest[os.write(fd, rest) :]


def _parse(data: bytes, at: int) -> tuple[list[Entry], int]:
    """The whole entries from offset `at`, and where the last one ends."""
    entries: list[Entry] = []
    view = memoryview(data)
    while at + _HEAD.size <= len(data):
        seq, ctype_len, cenc_len, body_len = _HEAD.unpack_from(data, at)
        start = at + _HEAD.size
        end = start + ctype_len + cenc_len + body_len
        if end + _TRAILER.size > len(data) or _TRAILER.unpack_from(data, end)[0] != seq:
            break
        ctype = bytes(view[start : start + ctype_len]).decode() or None
        cenc = bytes(view[start + ctype_len : start + ctype_len + cenc_len]).decode() or None
        entries.append(Entry(seq, ctype, cenc, bytes(view[end - body_len : end])))
        at = end + _TRAILER.size
    return entries, at


def _read_done(path: Path) -> set[int]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    whole = len(data) - len(data) % _DONE.size  # a mark cut short was never made
    return {seq for (seq,) in _DONE.iter_unpack(data[:whole])}


def _set_aside(path: Path) -> Path:
    """Rename an unreadable file (and an SQLite file's WAL files) out of the way; the new
    name."""
    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):
        part = path.with_name(path.name + suffix)
        if part.exists():
            part.rename(aside.with_name(aside.name + suffix))
    return aside


class JournalSink:
    """The last of the core's sinks: once a step's verdicts are stored (the store sink
    comes first), the journal entries of its traces are done."""

    name = "journal"

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def consume(self, decisions: Decisions) -> None:
        decided = [trace.trace_id for trace in decisions.traces]
        decided += [held.span.trace_id for held in decisions.late]
        self.journal.settle(decided)

    def close(self) -> None:
        self.journal.close()
