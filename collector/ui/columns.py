"""The verdict store's numbers as in-memory columns, for the web UI's aggregations.

The overview asks for exact percentiles of every stage over any time range and load-test
run. Reading half a million stage rows from SQLite for each answer takes longer than the
answer may; sorting them does not. So this module keeps one numpy column per field, caught
up from the store's tables on each read (only rows newer than the last one read, and
dropping what retention deleted), and aggregates there. It reads the tables `verdicts` and
`stage_results` of `store.py` through its own read-only connection and never writes.

Memory: about 65 bytes per verdict with five stages (65 MB at the store's default bound of
a million).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..judging.verdict import Status
from ..stats import PERCENTILES, BudgetShare, Slices, budget_share

__all__ = ["STATUS_CODES", "ColumnSelection", "VerdictColumns"]

STATUS_CODES = {status.value: code for code, status in enumerate(Status)}
_OVERRUN = STATUS_CODES[Status.OVERRUN.value]
_GOOD = (STATUS_CODES[Status.OK.value], STATUS_CODES[Status.WARN.value])
# Not judged on time to first token: out of the SLO's share and its denominator.
_OUTSIDE = tuple(STATUS_CODES[s.value] for s in Status if not s.in_slo)
_STATUS_SQL = "CASE {col} " + " ".join(f"WHEN '{s}' THEN {c}" for s, c in STATUS_CODES.items())
_STATUS_SQL += " ELSE -1 END"

Floats = npt.NDArray[np.float64]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ColumnSelection:
    """The verdicts of one time range (and run): their columns, row for row."""

    at: Floats  # evaluated_at, Unix seconds
    status: npt.NDArray[np.int8]
    ttft_ms: Floats  # NaN: no first token
    stage_ms: dict[str, Floats]  # NaN: unmeasured or not recorded
    stage_over: dict[str, npt.NDArray[np.bool_]]
    run_ids: list[str]  # distinct run ids in the selection, newest first
    first_blame: npt.NDArray[np.int32]  # index in `blame_names`; -1: blames no stage
    blame_names: list[str]

    def __len__(self) -> int:
        return len(self.at)

    def status_counts(self) -> dict[str, int]:
        counts = np.bincount(self.status[self.status >= 0], minlength=len(STATUS_CODES))
        return {status.value: int(counts[code]) for code, status in enumerate(Status)}

    def within_limits(self) -> float | None:
        """The share of verdicts within every limit (ok or warn), as the load-test report
        has it, of those the SLO counts (not `not_applicable`, `not_streamed`)."""
        counted = int((~np.isin(self.status, _OUTSIDE)).sum())
        if not counted:
            return None
        return float(np.isin(self.status, _GOOD).sum() / counted)

    def timed(self) -> npt.NDArray[np.bool_]:
        """Verdicts with a first token: the only ones whose stage times are TTFT time."""
        return ~np.isnan(self.ttft_ms)

    def describe(self, name: str | None) -> dict[str, Any]:
        """count, p50/p90/p95/p99, max and the share over the limit of a stage (None: TTFT).

        The same figures as `/api/summary`: traces without a first token left out,
        percentiles interpolated linearly (numpy's default, as `stats.percentile`).
        """
        timed = self.timed()
        if name is None:
            values = self.ttft_ms[timed]
            over = None
        elif name not in self.stage_ms:  # no verdict in the store names this stage
            values, over = np.empty(0), None
        else:
            ms = self.stage_ms[name]
            keep = timed & ~np.isnan(ms)
            values = ms[keep]
            over = self.stage_over[name][keep]
        if not len(values):
            empty: dict[str, Any] = {"count": 0, **{f"p{q}_ms": None for q in PERCENTILES}}
            return empty | {"max_ms": None, "over_limit_share": None}
        qs = np.percentile(values, PERCENTILES)
        result: dict[str, Any] = {"count": len(values)}
        result.update({f"p{q}_ms": float(v) for q, v in zip(PERCENTILES, qs, strict=True)})
        result["max_ms"] = float(values.max())
        if over is not None:
            result["over_limit_share"] = float(over.sum() / len(values))
        return result

    def share(self, names: Sequence[str], slices: Slices | None = None) -> BudgetShare:
        """Each stage's share of the TTFT and of the overruns' blame (`stats.share`), and
        per slice when `slices` are given; `names`: the stages in budget order."""
        where = {name: i for i, name in enumerate(names)}
        # One more entry, -1, where a verdict that blames no stage (-1) looks itself up.
        lookup = np.array([where.get(b, -1) for b in self.blame_names] + [-1], dtype=np.int64)
        return budget_share(
            names,
            at=self.at,
            ttft_ms=self.ttft_ms,
            stage_ms=self.stage_ms,
            overrun=self.status == _OVERRUN,
            blamed=lookup[self.first_blame],
            slices=slices,
        )

    def histogram(self, edges: Sequence[float]) -> list[int]:
        """TTFT counts between consecutive `edges`; values beyond the last go in the last bin."""
        values = self.ttft_ms[self.timed()]
        clipped = np.minimum(values, edges[-1])
        counts, _ = np.histogram(clipped, bins=np.asarray(edges))
        return [int(c) for c in counts]

    def p95_over_time(
        self, names: Sequence[str], start: float, end: float, buckets: int
    ) -> tuple[list[float], dict[str, list[float | None]]]:
        """Each stage's p95 in `buckets` equal slices of [start, end]: slice starts, values.

        One sort per stage, by slice then value, so that every slice is a sorted run; the
        p95 of each run is then taken with numpy's own linear interpolation, all at once.
        """
        width = (end - start) / buckets if end > start else 1.0
        starts = [start + i * width for i in range(buckets)]
        timed = self.timed()
        slot_of = np.clip(np.floor((self.at[timed] - start) / width), 0, buckets - 1)
        slot_of = slot_of.astype(np.int64)
        series: dict[str, list[float | None]] = {}
        for name in names:
            ms = self.stage_ms[name][timed]
            keep = ~np.isnan(ms)
            values, slots = ms[keep], slot_of[keep]
            order = np.lexsort((values, slots))
            values = values[order]
            counts = np.bincount(slots, minlength=buckets)
            firsts = np.concatenate(([0], np.cumsum(counts)[:-1]))
            out: list[float | None] = [None] * buckets
            present = np.nonzero(counts)[0]
            if len(present):
                p95 = _linear_percentile(values, firsts[present], counts[present], 95)
                for slot, value in zip(present, p95, strict=True):
                    out[int(slot)] = float(value)
            series[name] = out
        return starts, series


def _linear_percentile(
    values: Floats, firsts: npt.NDArray[np.int64], counts: npt.NDArray[np.int64], q: float
) -> Floats:
    """The q-th percentile of each sorted run `values[first:first + count]`.

    numpy's default method, arithmetic included (as `stats.percentile`): rank
    (n - 1) * q / 100 between the closest ranks, and numpy's `_lerp`.
    """
    rank = (counts - 1) * (q / 100)
    low = np.floor(rank).astype(np.int64)
    high = np.minimum(low + 1, counts - 1)
    gamma = rank - low
    a, b = values[firsts + low], values[firsts + high]
    diff = b - a
    result: Floats = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    return result


class _Grow:
    """A 1-d array with room to append, and a start that moves when rows are retired."""

    def __init__(self, dtype: Any, fill: Any) -> None:
        self.data = np.empty(1024, dtype=dtype)
        self.fill = fill
        self.dtype = dtype

    def ensure(self, size: int) -> None:
        if size > len(self.data):
            bigger = np.empty(max(size, 2 * len(self.data)), dtype=self.dtype)
            bigger[: len(self.data)] = self.data
            self.data = bigger


class VerdictColumns:
    """Columns of the verdict store at `path`; `select` catches up, then filters.

    Thread-safe: one lock around catching up and selecting (answers take milliseconds).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._n = 0  # rows held
        self._last_seq = 0
        self._seq = _Grow(np.int64, 0)
        self._at = _Grow(np.float64, np.nan)
        self._status = _Grow(np.int8, -1)
        self._ttft = _Grow(np.float64, np.nan)
        self._run = _Grow(np.int32, -1)
        self._budget = _Grow(np.int32, -1)  # the budget that judged it, a code of `_budgets`
        self._blame = _Grow(np.int32, -1)  # the first-blamed stage, a code of `_blame_names`
        self._stage_ms: dict[str, _Grow] = {}
        self._stage_status: dict[str, _Grow] = {}
        self._runs: list[str] = []
        self._run_codes: dict[str, int] = {}
        self._budgets: list[str] = []
        self._budget_codes: dict[str, int] = {}
        self._blame_names: list[str] = []
        self._blame_codes: dict[str, int] = {}

    def warm(self) -> None:
        """Read the store into columns now, not when the first reader asks (seconds at
        100k verdicts); for a background thread at start-up, so failures are logged."""
        try:
            self.select(since=time.time())
        except Exception:  # a page will try again, and say what is wrong
            log.exception("reading the verdict store into columns failed")

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            self._connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._connection.execute("PRAGMA busy_timeout=5000")
        return self._connection

    def __len__(self) -> int:
        return self._n

    def select(
        self,
        *,
        since: float | None = None,
        until: float | None = None,
        run_id: str | None = None,
        budget: str | None = None,
    ) -> ColumnSelection:
        """The verdicts judged in [since, until) (either open), of one run and judged by
        one budget if given."""
        with self._lock:
            self._catch_up()
            n = self._n
            keep = self._kept(since, until, run_id)
            if budget is not None:
                keep &= self._budget.data[:n] == self._budget_codes.get(budget, -2)
            at = self._at.data[:n]
            runs = self._run.data[:n][keep]
            seen: list[str] = []
            if len(runs):
                codes, first = np.unique(runs[::-1], return_index=True)
                for code in codes[np.argsort(first)]:
                    if code >= 0:
                        seen.append(self._runs[int(code)])
            return ColumnSelection(
                at=at[keep].copy(),
                status=self._status.data[:n][keep].copy(),
                ttft_ms=self._ttft.data[:n][keep].copy(),
                stage_ms={k: g.data[:n][keep].copy() for k, g in self._stage_ms.items()},
                stage_over={k: g.data[:n][keep] == _OVERRUN for k, g in self._stage_status.items()},
                run_ids=seen,
                first_blame=self._blame.data[:n][keep].copy(),
                blame_names=list(self._blame_names),
            )

    def budgets(
        self, *, since: float | None = None, until: float | None = None, run_id: str | None = None
    ) -> list[tuple[str, int]]:
        """The budgets that judged the verdicts of [since, until) (of one run if given), with
        how many each, most first (then by name)."""
        with self._lock:
            self._catch_up()
            codes = self._budget.data[: self._n][self._kept(since, until, run_id)]
            values, counts = np.unique(codes[codes >= 0], return_counts=True)
            found = [
                (self._budgets[int(code)], int(count))
                for code, count in zip(values, counts, strict=True)
            ]
        return sorted(found, key=lambda pair: (-pair[1], pair[0]))

    def _kept(
        self, since: float | None, until: float | None, run_id: str | None
    ) -> npt.NDArray[np.bool_]:
        """Under the lock: which rows are in the range and the run."""
        n = self._n
        at = self._at.data[:n]
        keep = np.ones(n, dtype=np.bool_)
        if since is not None:
            keep &= at >= since
        if until is not None:
            keep &= at < until
        if run_id is not None:
            keep &= self._run.data[:n] == self._run_codes.get(run_id, -2)
        return keep

    def runs(self) -> list[tuple[str, int, float, float]]:
        """Every load-test run held: (run id, verdicts, first and last judged), newest first."""
        with self._lock:
            self._catch_up()
            n = self._n
            codes = self._run.data[:n]
            at = self._at.data[:n]
            found = []
            for code in np.unique(codes[codes >= 0]):
                mine = at[codes == code]
                found.append((self._runs[int(code)], len(mine), float(mine[0]), float(mine[-1])))
        return sorted(found, key=lambda run: run[3], reverse=True)

    # -- catching up with the store ---------------------------------------------------------

    def _catch_up(self) -> None:
        try:
            connection = self._connect()
            first = connection.execute("SELECT MIN(seq) FROM verdicts").fetchone()[0]
        except sqlite3.OperationalError:  # no store file or table yet: nothing judged
            self.close_connection()
            return
        if first is None:
            self._retire(self._n)
            return
        held = self._seq.data[: self._n]
        self._retire(int(np.searchsorted(held, first)))
        self._read_new(connection)

    def close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _retire(self, count: int) -> None:
        """Forget the oldest `count` rows (retention deleted them from the store)."""
        if count <= 0:
            return
        n = self._n
        for grow in self._columns():
            grow.data[: n - count] = grow.data[count:n]
        self._n = n - count

    def _columns(self) -> list[_Grow]:
        fixed = [self._seq, self._at, self._status, self._ttft, self._run, self._budget]
        fixed.append(self._blame)
        return fixed + list(self._stage_ms.values()) + list(self._stage_status.values())

    def _read_new(self, connection: sqlite3.Connection) -> None:
        """Append the verdicts stored after the last one read: SQLite pivots the stage rows
        to one row a verdict, numpy takes the numbers as they come (NULL becomes NaN)."""
        after = self._last_seq
        verdicts = connection.execute(
            "SELECT seq, evaluated_at, " + _STATUS_SQL.format(col="status") + ", ttft_ms"
            " FROM verdicts WHERE seq > ? ORDER BY seq",
            (after,),
        ).fetchall()
        if not verdicts:
            return
        numbers = np.array(verdicts, dtype=np.float64)
        last = int(numbers[-1, 0])
        runs = connection.execute(
            "SELECT run_id, json_extract(blame, '$[0]'), budget FROM verdicts"
            " WHERE seq > ? AND seq <= ? ORDER BY seq",
            (after, last),
        ).fetchall()
        names = [
            name
            for (name,) in connection.execute(
                "SELECT DISTINCT stage FROM stage_results WHERE seq > ? AND seq <= ?",
                (after, last),
            )
        ]
        count = len(verdicts)
        start, end = self._n, self._n + count
        for grow in self._columns():
            grow.ensure(end)
            grow.data[start:end] = grow.fill
        seqs = numbers[:, 0].astype(np.int64)
        self._seq.data[start:end] = seqs
        self._at.data[start:end] = numbers[:, 1]
        self._status.data[start:end] = numbers[:, 2]
        self._ttft.data[start:end] = numbers[:, 3]
        self._run.data[start:end] = [self._run_code(run_id) for run_id, _, _ in runs]
        self._budget.data[start:end] = [self._budget_code(name) for _, _, name in runs]
        self._blame.data[start:end] = [self._blame_code(first) for _, first, _ in runs]
        if names:
            status = _STATUS_SQL.format(col="status")
            pivot = ", ".join(
                f"MAX(CASE WHEN stage = ? THEN ms END), MAX(CASE WHEN stage = ? THEN {status} END)"
                for _ in names
            )
            stage_rows = connection.execute(
                f"SELECT seq, {pivot} FROM stage_results WHERE seq > ? AND seq <= ?"
                " GROUP BY seq ORDER BY seq",
                [*(n for name in names for n in (name, name)), after, last],
            ).fetchall()
            if stage_rows:
                table = np.array(stage_rows, dtype=np.float64)
                positions = start + np.searchsorted(seqs, table[:, 0].astype(np.int64))
                for i, name in enumerate(names):
                    ms_col, status_col = self._stage(name, end)
                    ms_col.data[positions] = table[:, 1 + 2 * i]
                    codes = table[:, 2 + 2 * i]
                    status_col.data[positions] = np.where(np.isnan(codes), -1, codes)
        self._n = end
        self._last_seq = last

    def _stage(self, name: str, size: int) -> tuple[_Grow, _Grow]:
        if name not in self._stage_ms:
            ms, status = _Grow(np.float64, np.nan), _Grow(np.int8, -1)
            ms.ensure(size)
            status.ensure(size)
            ms.data[:size] = np.nan
            status.data[:size] = -1
            self._stage_ms[name], self._stage_status[name] = ms, status
        return self._stage_ms[name], self._stage_status[name]

    def _blame_code(self, name: str | None) -> int:
        if name is None:
            return -1
        code = self._blame_codes.get(name)
        if code is None:
            code = self._blame_codes[name] = len(self._blame_names)
            self._blame_names.append(name)
        return code

    def _budget_code(self, name: str) -> int:
        code = self._budget_codes.get(name)
        if code is None:
            code = self._budget_codes[name] = len(self._budgets)
            self._budgets.append(name)
        return code

    def _run_code(self, run_id: str | None) -> int:
        if run_id is None:
            return -1
        code = self._run_codes.get(run_id)
        if code is None:
            code = self._run_codes[run_id] = len(self._runs)
            self._runs.append(run_id)
        return code
