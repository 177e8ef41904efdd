"""Where the budget goes over many traces: each stage's share of the time to first token
and its share of the overruns' blame, overall and per time slice.

Definitions (docs/budget-share.md says the same for users):

- **Share of TTFT** of a stage: the sum of its exclusive times on the critical path over
  the sum of the TTFTs, over the traces that have a TTFT. A stage `unmeasured` in a trace
  adds nothing to it. `unattributed` is a row of its own: what is left of each TTFT after
  its stages (DESIGN §5 rule 5 makes the two add up), so the shares add up to 100 %.
- **Share of the blame** of a stage: among the traces whose status is `overrun`, the share
  whose blame names this stage first, i.e. the stage furthest over its limit (or, when only
  the total overran, furthest past its target; DESIGN §5 rule 7). Each overrun carries one
  unit of blame, given whole to its first-blamed stage rather than split over its blame
  list: then a share is a count of traces out of a count of traces, which people can check
  against the trace list and which has an exact binomial reading (a Wilson interval says
  how sure it is). An overrun that blames no stage (the total overran while every stage
  kept to its target: the time was unattributed) counts for `unattributed`.

The core takes columns (numpy arrays, one row a trace) and is O(n); `share_of` builds them
from verdicts or anything shaped like one (`ShareRow`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ..judging.verdict import Status, Verdict
from .intervals import CONFIDENCE, min_count, wilson_interval
from .slices import Slices, slices_for

__all__ = [
    "UNATTRIBUTED",
    "WIDE_INTERVAL",
    "BudgetShare",
    "ShareRow",
    "ShareSlice",
    "StageShare",
    "budget_share",
    "share_of",
    "share_over_time",
]

UNATTRIBUTED = "unattributed"
# A blame share whose interval is wider than this (in share, 0..1) rests on few overruns,
# and the pages and tables say so next to it.
WIDE_INTERVAL = 0.2

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class StageShare:
    """One stage (or `unattributed`): its summed time and share of the summed TTFT, and the
    overruns it is first blamed for, their share and that share's Wilson interval."""

    name: str
    ms: float  # summed exclusive time over the traces with a TTFT
    measured: int  # traces with a TTFT in which the stage was measured
    time_share: float | None  # None: no trace with a TTFT
    blamed: int  # overruns that blame this stage first
    blame_share: float | None  # None: no overrun
    blame_low: float
    blame_high: float

    @property
    def wide(self) -> bool:
        """The blame share rests on too few overruns to be read closely."""
        return self.blame_high - self.blame_low > WIDE_INTERVAL

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ms": round(self.ms, 2),
            "measured": self.measured,
            "time_share": self.time_share,
            "blamed": self.blamed,
            "blame_share": self.blame_share,
            "blame_interval": [self.blame_low, self.blame_high],
            "blame_interval_wide": self.wide,
        }


@dataclass(frozen=True, slots=True)
class ShareSlice:
    """The same shares over the traces of one time slice; None where the slice has no
    trace with a TTFT (time) or no overrun (blame)."""

    start: float
    traces: int  # with a TTFT
    overruns: int
    time_share: Mapping[str, float | None]
    blame_share: Mapping[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "traces": self.traces,
            "overruns": self.overruns,
            "time_share": dict(self.time_share),
            "blame_share": dict(self.blame_share),
        }


@dataclass(frozen=True, slots=True)
class BudgetShare:
    """Each stage's share of the TTFT and of the blame over some traces, and per slice."""

    traces: int  # traces with a TTFT: what the time shares rest on
    ttft_ms: float  # their summed TTFT
    overruns: int  # traces with status overrun: what the blame shares rest on
    stages: tuple[StageShare, ...]  # budget order, `unattributed` last
    slices: tuple[ShareSlice, ...] = ()
    slice_width_s: float | None = None
    confidence: float = CONFIDENCE

    def stage(self, name: str) -> StageShare:
        for row in self.stages:
            if row.name == name:
                return row
        raise KeyError(name)

    def leading(self) -> StageShare | None:
        """The stage that takes most of the blame (most of the time when nothing overran);
        None when no trace has a TTFT."""
        if not self.traces and not self.overruns:
            return None
        if self.overruns:
            return max(self.stages, key=lambda s: (s.blamed, s.ms))
        return max(self.stages, key=lambda s: s.ms)

    def sentence(self, period: str) -> str:
        """`in the last 15 min, retrieval took 31 % of the time to first token and 60 % of
        the blame`: the leading stage, with how sure its blame share is when few overran."""
        lead = self.leading()
        if lead is None:
            return f"{period}, no trace with a time to first token was judged"
        text = f"{period}, {lead.name} took {_pct(lead.time_share)} of the time to first token"
        if not self.overruns:
            return text + " and no trace overran"
        text += f" and {_pct(lead.blame_share)} of the blame"
        runs = "overrun" if self.overruns == 1 else "overruns"
        if lead.wide:
            text += (
                f" (only {self.overruns} {runs}: {self.confidence * 100:.0f} % interval "
                f"{lead.blame_low * 100:.0f}–{_pct(lead.blame_high)})"
            )
        else:
            text += f" (of {self.overruns} {runs})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "traces": self.traces,
            "ttft_ms": round(self.ttft_ms, 2),
            "overruns": self.overruns,
            "confidence": self.confidence,
            "stages": [s.to_dict() for s in self.stages],
            "slice_width_s": self.slice_width_s,
            "slices": [s.to_dict() for s in self.slices],
        }


def _pct(share: float | None) -> str:
    return "–" if share is None else f"{share * 100:.0f} %"


def budget_share(
    names: Sequence[str],
    *,
    at: Floats,
    ttft_ms: Floats,
    stage_ms: Mapping[str, Floats],
    overrun: npt.NDArray[np.bool_],
    blamed: Ints,
    slices: Slices | None = None,
) -> BudgetShare:
    """The shares over columns, row for row a trace.

    `names`: the stages, in budget order. `at`: a time per trace (Unix seconds or any
    clock; only the slices read it). `ttft_ms`: NaN without a first token. `stage_ms`: by
    name, NaN where unmeasured (a name missing: never measured). `overrun`: the trace's
    status is overrun. `blamed`: the index in `names` of its first-blamed stage, any other
    value (e.g. -1, len(names)) for none or a stage not in `names`; read only where
    `overrun`.
    """
    rows = len(names) + 1  # the stages, then unattributed
    timed = ~np.isnan(ttft_ms)
    ttft = np.where(timed, ttft_ms, 0.0)
    # Per trace and row: ms that count (NaN and traces without a TTFT: 0).
    parts = np.zeros((rows, len(ttft)), dtype=np.float64)
    measured = np.zeros(rows, dtype=np.int64)
    for i, name in enumerate(names):
        column = stage_ms.get(name)
        if column is None:
            continue
        known = timed & ~np.isnan(column)
        parts[i] = np.where(known, column, 0.0)
        measured[i] = int(known.sum())
    # What no stage holds: the verdict's `unattributed_ms` (stage times and it add up to the
    # TTFT at 0.01 ms, DESIGN §5 rule 5), rounded as it is, so float noise shows as 0, not -0.
    parts[-1] = np.where(timed, np.round(ttft - parts[:-1].sum(axis=0), 2), 0.0) + 0.0
    measured[-1] = int(timed.sum())
    codes = np.where(overrun, np.where((blamed >= 0) & (blamed < len(names)), blamed, rows - 1), -1)
    codes = codes.astype(np.int64)

    sums = parts.sum(axis=1)
    total = float(ttft.sum())
    blame_counts = np.bincount(codes[codes >= 0], minlength=rows)
    n_over = int(overrun.sum())
    labels = [*names, UNATTRIBUTED]
    stages = []
    for i, name in enumerate(labels):
        low, high = wilson_interval(int(blame_counts[i]), n_over)
        stages.append(
            StageShare(
                name=name,
                ms=float(sums[i]),
                measured=int(measured[i]),
                time_share=float(sums[i] / total) if total > 0 else None,
                blamed=int(blame_counts[i]),
                blame_share=float(blame_counts[i] / n_over) if n_over else None,
                blame_low=low,
                blame_high=high,
            )
        )
    result = BudgetShare(
        traces=int(timed.sum()), ttft_ms=total, overruns=n_over, stages=tuple(stages)
    )
    if slices is None:
        return result
    return BudgetShare(
        traces=result.traces,
        ttft_ms=result.ttft_ms,
        overruns=result.overruns,
        stages=result.stages,
        slices=_slices(labels, at, timed, ttft, parts, codes, slices),
        slice_width_s=slices.width,
    )


def _slices(
    labels: Sequence[str],
    at: Floats,
    timed: npt.NDArray[np.bool_],
    ttft: Floats,
    parts: Floats,
    codes: Ints,
    slices: Slices,
) -> tuple[ShareSlice, ...]:
    """Per slice: weighted counts by slot, one `bincount` a row."""
    count = slices.count
    slot = np.clip(np.floor((at - slices.start) / slices.width), 0, count - 1).astype(np.int64)
    totals = np.bincount(slot, weights=ttft, minlength=count)
    traces = np.bincount(slot[timed], minlength=count)
    over = codes >= 0
    overruns = np.bincount(slot[over], minlength=count)
    time_by = [np.bincount(slot, weights=parts[i], minlength=count) for i in range(len(labels))]
    blame_by = [np.bincount(slot[codes == i], minlength=count) for i in range(len(labels))]
    out = []
    for k, start in enumerate(slices.starts()):
        has_time = traces[k] > 0 and totals[k] > 0
        out.append(
            ShareSlice(
                start=start,
                traces=int(traces[k]),
                overruns=int(overruns[k]),
                time_share={
                    name: float(time_by[i][k] / totals[k]) if has_time else None
                    for i, name in enumerate(labels)
                },
                blame_share={
                    name: float(blame_by[i][k] / overruns[k]) if overruns[k] else None
                    for i, name in enumerate(labels)
                },
            )
        )
    return tuple(out)


class ShareRow(NamedTuple):
    """What the shares read of one judged trace: any verdict-like record becomes one."""

    at: float
    ttft_ms: float | None
    stage_ms: Mapping[str, float | None]  # by name; None: unmeasured
    status: Status
    blame: Sequence[str]

    @classmethod
    def of(cls, verdict: Verdict, at: float | None = None) -> ShareRow:
        """A verdict, at `at` (default: when it was judged)."""
        return cls(
            at=verdict.evaluated_at.timestamp() if at is None else at,
            ttft_ms=verdict.ttft_ms,
            stage_ms={s.name: s.ms for s in verdict.stages},
            status=verdict.status,
            blame=verdict.blame,
        )


def share_of(
    judged: Iterable[ShareRow | Verdict],
    *,
    names: Sequence[str] | None = None,
    slices: Slices | None = None,
) -> BudgetShare:
    """The shares over verdicts (or `ShareRow` records). `names`: the stages in budget order
    (default: as the records name them, first seen first)."""
    rows = [j if isinstance(j, ShareRow) else ShareRow.of(j) for j in judged]
    if names is None:
        seen: dict[str, None] = {}
        for row in rows:
            seen.update(dict.fromkeys(row.stage_ms))
        names = list(seen)
    index = {name: i for i, name in enumerate(names)}
    nan = float("nan")
    return budget_share(
        names,
        at=np.array([r.at for r in rows], dtype=np.float64),
        ttft_ms=np.array([nan if r.ttft_ms is None else r.ttft_ms for r in rows], dtype=np.float64),
        stage_ms={
            name: np.array(
                [nan if (ms := r.stage_ms.get(name)) is None else ms for r in rows],
                dtype=np.float64,
            )
            for name in names
        },
        overrun=np.array([r.status is Status.OVERRUN for r in rows], dtype=np.bool_),
        blamed=np.array(
            [index.get(r.blame[0], -1) if r.blame else -1 for r in rows], dtype=np.int64
        ),
        slices=slices,
    )


def share_over_time(
    judged: Sequence[ShareRow], names: Sequence[str], max_slices: int
) -> BudgetShare:
    """The shares over `judged`, and per round slice of the time they span: at most
    `max_slices` slices (0: none), each wide enough to hold on average the traces a p95
    needs, as the overview slices its figures."""
    cut = None
    if max_slices and judged:
        times = [j.at for j in judged]
        cut = slices_for(
            min(times), max(times), len(judged), per_slice=min_count(95), max_slices=max_slices
        )
    return share_of(judged, names=names, slices=cut)
