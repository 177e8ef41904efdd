"""The budget evaluator: one trace's spans in, one verdict out (DESIGN §5). Pure.

Shared by the live collector, `spanbudget check` and the load tester.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from ..budget.model import Budget, FirstTokenMark, NonStreamed, Selector, WhenAbsent
from ..spans import Span, seconds_value
from .attribution import Node, Tree, assemble, attribute_window
from .llm_calls import LlmRequest, read_request, reading, settle
from .stage_table import StageTable
from .verdict import SEVERITY as _SEVERITY
from .verdict import StageResult, Status, Verdict, new_stage_result
from .verdict_rules import (
    apportion,
    band,
    blame,
    carried_attributes,
    round_ms,
)

__all__ = [
    "COMPILED",
    "PURE_PYTHON_ENV",
    "Evaluator",
    "Judge",
    "Judged",
    "evaluate",
    "first_token_ns",
]

try:  # the fast path compiled (_judge.pyx, built by setup.py where a C compiler is)
    from . import _judge
except ImportError:
    _judge = None  # type: ignore[assignment]

COMPILED = _judge is not None  # whether this install has the compiled fast path
# Set (to anything but "" or "0"), evaluators judge on the pure-Python path even where the
# compiled one is built: `make test` runs the judging tests once more so, as msgpack's CI
# does with MSGPACK_PUREPYTHON, so that neither path can rot.
PURE_PYTHON_ENV = "SPANBUDGET_PURE_PYTHON"

# Enum members read through the class cost a metaclass look-up each; the hot path reads
# these module constants instead.
_ABSENT, _UNMEASURED = Status.ABSENT, Status.UNMEASURED
_ERROR, _INCOMPLETE = Status.ERROR, Status.INCOMPLETE
_UNMEASURED_WHEN_ABSENT = WhenAbsent.UNMEASURED


@dataclass(frozen=True, slots=True)
class Judged:
    """A verdict and, beside it, what the judging said of the spans themselves: the root,
    the stage of each span that belongs to one (matched or inherited), by span id, and the
    first token (ns since the epoch, or None) with the mark that gave it (its index in the
    budget's `first_token`, -1 for a whole response taken as the first token) and the span
    that carried it. `tree` is the attributed tree, kept only when asked for
    (`judge(..., keep_tree=True)`, for views that draw it)."""

    verdict: Verdict
    root_span_id: str
    span_stages: Mapping[str, str]
    first_token_ns: int | None
    tree: Tree | None = None
    first_token_mark: int | None = None
    first_token_span: str | None = None


class Judge(Protocol):
    """What judges traces: an `Evaluator` (one budget), or `auto.Judges` (the budget each
    trace's instrumentation calls for)."""

    budget: Budget

    def judge(
        self, spans: Sequence[Span], *, evaluated_at: datetime, keep_tree: bool = False
    ) -> Judged | None: ...


class Evaluator:
    """Judges traces against one budget.

    Holds only the budget, compiled: the stage selectors as a bounded memo of decisions
    per span shape (spans of one service repeat the same few shapes) and the first-token
    marks as a table.

    Two paths give the same judgements (tests hold them to it): the compiled fast path
    (`_judge.pyx`), used when it was built, and the reference path on a `Node` tree
    (`attribution`), for `keep_tree`, for the traces the compiled path hands back, and
    wherever the compiled one is not built or is switched off. This is the one place that
    chooses: `compiled=True` insists on the compiled path (ImportError without it),
    `compiled=False` refuses it, and None takes it unless the environment variable
    `SPANBUDGET_PURE_PYTHON` is set.
    """

    def __init__(self, budget: Budget, *, compiled: bool | None = None) -> None:
        self.budget = budget
        # Stage matching compiled once: a dict look-up per span shape, and the attributes
        # the remaining selectors read (DESIGN §5 rule 4).
        self._table = StageTable(
            [(stage.name, selector) for stage in budget.stages for selector in stage.selectors]
        )
        self._stage_names = budget.stage_names()
        self._marks = _mark_table(budget.first_token)
        # What a verdict's `first_token` says of each mark, described once.
        self._mark_sources = [(m.source, m.describe(), not m.estimate) for m in budget.first_token]
        if compiled and _judge is None:
            raise ImportError(
                "spanbudget's compiled evaluator is not built here: reinstall spanbudget "
                "where a C compiler is (pip install builds it), or pass compiled=False"
            )
        if compiled is None:
            compiled = os.environ.get(PURE_PYTHON_ENV, "") in ("", "0")
        on = _judge is not None and compiled
        # The walks of reading the LLM calls, and `dataclasses.replace` for a verdict and a
        # `Judged`: compiled with the rest.
        self._walks = reading(budget.first_token, _judge if on else None)
        self._compiled = (
            _judge.CompiledJudge(
                budget, self._table, self._marks, self._mark_sources, self._walks, Judged
            )
            if on
            else None
        )
        self._evolve: Callable[..., Any] = replace if self._compiled is None else _judge.evolve

    @property
    def compiled(self) -> bool:
        """Whether this evaluator judges on the compiled fast path."""
        return self._compiled is not None

    def evaluate(self, spans: Sequence[Span], *, evaluated_at: datetime) -> Verdict | None:
        """The verdict of one trace, or None when no span matches any stage (not judged)."""
        judged = self.judge(spans, evaluated_at=evaluated_at)
        return None if judged is None else judged.verdict

    def judge(
        self,
        spans: Sequence[Span],
        *,
        evaluated_at: datetime,
        keep_tree: bool = False,
        instrumentation: str | None = None,
    ) -> Judged | None:
        """The verdict with each span's stage (to annotate the spans), or None: not judged.
        `instrumentation` names the library whose preset this evaluator's budget is, when
        recognition chose it (the verdict says so).

        With `keep_tree`, `Judged.tree` is the attributed tree the verdict came from: its
        nodes clipped to the TTFT window, with `self_ns` and `on_path` set; call
        `tree.release()` when done with it.
        """
        judged: Judged | None = None
        request: LlmRequest | None = None
        if not keep_tree and self._compiled is not None:
            # The compiled judge reads the calls too, where its own index of the spans
            # answers (most traces); else `read` below.
            compiled, request = self._compiled.judge_reading(spans, evaluated_at)
            if compiled is None:
                return None
            if isinstance(compiled, Judged):
                judged = compiled  # else it handed the trace back: judged below
        if judged is None:
            judged = self._judge_tree(spans, evaluated_at, keep_tree)
            if judged is None:
                return None
        fast = self._compiled
        if request is None:
            request = (
                fast.read(spans, judged.first_token_span)
                if fast is not None
                else read_request(
                    spans, judged.first_token_span, self.budget.first_token, walks=self._walks
                )
            )
        if (
            request.streamed is False
            and request.response_end is not None
            and self.budget.non_streamed is NonStreamed.JUDGE
        ):  # judged again, the whole response as its first token (on the tree: rare)
            if judged.tree is not None:
                judged.tree.release()
            again = self._judge_tree(
                spans, evaluated_at, keep_tree, response_end=request.response_end[0]
            )
            if again is not None:
                judged = again
        if fast is not None:  # most traces' settling, compiled; None: the rest, below
            settled = fast.settle(judged, request, spans, instrumentation)
            if settled is not None:
                return settled
        verdict = settle(
            judged.verdict,
            request,
            self.budget,
            first_token=self._source(judged, spans),
            window_start_ns=_start_of(judged.root_span_id, spans),
            instrumentation=instrumentation,
            evolve=self._evolve,
        )
        evolved: Judged = self._evolve(judged, verdict=verdict)
        return evolved

    def _source(self, judged: Judged, spans: Sequence[Span]) -> dict[str, str | bool] | None:
        """The verdict's `first_token`: the mark that gave it, and the span that carried it."""
        if judged.first_token_ns is None or judged.first_token_mark is None:
            return None
        span = next((s.name for s in spans if s.span_id == judged.first_token_span), "")
        if judged.first_token_mark < 0:
            return {"source": "response end", "mark": "the call's end", "span": span, "exact": True}
        source, described, exact = self._mark_sources[judged.first_token_mark]
        return {"source": source, "mark": described, "span": span, "exact": exact}

    def stage_of(self, node: Node, *, is_root: bool) -> str | None:
        """The first stage (file order) with a selector that matches, else None."""
        stage = self._table.stage(node.name, node.kind, node.service, node.attributes, is_root)
        return stage or None

    def _judge_tree(
        self,
        spans: Sequence[Span],
        evaluated_at: datetime,
        keep_tree: bool,
        *,
        response_end: str | None = None,
    ) -> Judged | None:
        """The reference path, on a `Node` tree. `response_end`: the span id of an LLM call
        whose end is the first token (a response not streamed, judged whole)."""
        matched: set[str] = set()
        table = self._table

        def classify(node: Node, is_root: bool) -> str | None:
            stage = table.stage(node.name, node.kind, node.service, node.attributes, is_root)
            if stage:
                matched.add(stage)
                return stage
            return None

        tree = assemble(spans, classify)
        if tree is None:
            return None
        if not matched:
            tree.release()
            return None
        try:
            first = _first_token(tree, self._marks, spans)
            if response_end is not None:
                first = _response_end(tree, response_end) or first
            instant = None if first is None else first.instant
            verdict = self._judge(spans[0].trace_id, tree, matched, instant, evaluated_at)
            stages = {n.span_id: n.stage for n in tree.nodes if n.stage and not n.virtual}
        except BaseException:
            tree.release()
            raise
        mark, carrier = (None, None) if first is None else (first.mark, first.span_id)
        root_span_id = tree.root.span_id
        kept = tree if keep_tree else None
        if not keep_tree:
            tree.release()
        return Judged(verdict, root_span_id, stages, instant, kept, mark, carrier)

    def _judge(
        self,
        trace_id: str,
        tree: Tree,
        matched: set[str],
        first_token: int | None,
        evaluated_at: datetime,
    ) -> Verdict:
        root = tree.root
        window_end = first_token if first_token is not None else root.end
        uncovered = attribute_window(tree, root.start, window_end)

        stage_ns = dict.fromkeys(self._stage_names, 0)
        breakdown_ns: dict[str, dict[str, int]] = {name: {} for name in stage_ns}
        unattributed = uncovered
        for node in tree.nodes:
            if not node.self_ns:
                continue
            if node.stage is None:
                unattributed += node.self_ns
            else:
                stage_ns[node.stage] += node.self_ns
                parts = breakdown_ns[node.stage]
                parts[node.name] = parts.get(node.name, 0) + node.self_ns
        return self._verdict(
            trace_id,
            matched,
            stage_ns,
            breakdown_ns,
            unattributed,
            window_start=root.start,
            window_end=window_end,
            first_token=first_token,
            error=any(node.error and node.on_path for node in tree.nodes),
            skew_ns=tree.skew_ns,
            carried=carried_attributes(root.attributes),
            evaluated_at=evaluated_at,
        )

    def _verdict(
        self,
        trace_id: str,
        matched: set[str],
        stage_ns: dict[str, int],
        breakdown_ns: dict[str, dict[str, int]],
        unattributed: int,
        *,
        window_start: int,
        window_end: int,
        first_token: int | None,
        error: bool,
        skew_ns: int,
        carried: dict[str, str | int | float | bool],
        evaluated_at: datetime,
    ) -> Verdict:
        """The verdict from the attributed times (`window_start` is the clipped root's)."""
        budget = self.budget
        names = list(stage_ns)
        rounded = apportion(
            [stage_ns[n] for n in names] + [unattributed], window_end - window_start
        )
        stage_ms = dict(zip(names, rounded, strict=False))
        total_target, total_limit = budget.total_target_ms, budget.total_limit_ms
        results: list[StageResult] = []
        for stage in budget.stages:
            if stage.name in matched:
                ms = stage_ms[stage.name]
                status = band(ms, stage.target_ms, stage.limit_ms)
                breakdown = {k: round_ms(v) for k, v in breakdown_ns[stage.name].items()}
                results.append(
                    new_stage_result(
                        stage.name, ms, stage.target_ms, stage.limit_ms, status, breakdown
                    )
                )
            elif stage.when_absent is _UNMEASURED_WHEN_ABSENT:
                total_target -= stage.target_ms
                total_limit -= stage.limit_ms
                results.append(
                    new_stage_result(
                        stage.name, None, stage.target_ms, stage.limit_ms, _UNMEASURED, {}
                    )
                )
            else:
                results.append(
                    new_stage_result(stage.name, 0.0, stage.target_ms, stage.limit_ms, _ABSENT, {})
                )

        ttft_ms = round_ms(window_end - window_start) if first_token is not None else None
        if ttft_ms is None:
            total_status = _INCOMPLETE
            overrun_ms = 0.0
        else:
            total_status = band(ttft_ms, total_target, total_limit)
            overrun_ms = round(max(0.0, ttft_ms - total_limit), 2)

        if error:
            status = _ERROR
        elif ttft_ms is None:
            status = _INCOMPLETE
        else:
            status = max([total_status, *(r.status for r in results)], key=_SEVERITY.__getitem__)

        return Verdict(  # positional: the fields in their order, as the class lists them
            trace_id,
            budget.name,
            status,
            ttft_ms,
            total_target,
            total_limit,
            total_status,
            tuple(results),
            rounded[-1],
            blame(results, total_status),
            overrun_ms,
            round_ms(skew_ns),
            carried,
            evaluated_at,
        )


def _start_of(span_id: str, spans: Sequence[Span]) -> int:
    return next((s.start_ns for s in spans if s.span_id == span_id), spans[0].start_ns)


def evaluate(spans: Sequence[Span], budget: Budget, *, evaluated_at: datetime) -> Verdict | None:
    """One-off evaluation; build an `Evaluator` once to judge many traces."""
    return Evaluator(budget).evaluate(spans, evaluated_at=evaluated_at)


# A mark as the evaluator tries it: (attribute or None, event names, anchor, match, the
# child whose start is the instant or None).
_Mark = tuple[str | None, frozenset[str], Selector | None, tuple[Selector, ...], Selector | None]


def _mark_table(marks: Sequence[FirstTokenMark]) -> tuple[_Mark, ...]:
    return tuple((m.attribute, m.events, m.anchor, m.match, m.first_child) for m in marks)


def first_token_ns(
    tree: Tree, marks: Sequence[FirstTokenMark], spans: Sequence[Span]
) -> int | None:
    """The first-token instant of an assembled tree (DESIGN §5 rule 2), or None without one.

    `spans` are the ones the tree was assembled from (event marks read their events).
    """
    found = _first_token(tree, _mark_table(marks), spans)
    return None if found is None else found.instant


@dataclass(frozen=True, slots=True)
class _FirstToken:
    instant: int  # ns since the epoch, never before the root's start
    mark: int  # its index in the budget's marks
    span_id: str  # the span that carried it


def _first_token(tree: Tree, marks: tuple[_Mark, ...], spans: Sequence[Span]) -> _FirstToken | None:
    """The instant of the outermost span that carries a first-token mark (DESIGN §5 rule 2)
    with that mark and span, and on every node that carries one, its own instant as
    `Node.mark`: each is done with the first token there, for attribution.

    On each span the marks are tried in the budget's order and the first that applies
    counts; among spans, the shallowest wins, then the earliest start, the earliest
    instant, the lowest span id (the same whatever order the spans came in).
    """
    best: tuple[int, int, int, str] | None = None
    best_mark = -1
    root = tree.root
    by_id: dict[str, Span] | None = None  # built only when an event mark is tried
    for node in tree.nodes:
        if node.virtual:
            continue
        attributes = node.attributes
        for index, (key, names, anchor, match, child) in enumerate(marks):
            if child is not None:
                if match and not _carries(match, node, node is root):
                    continue
                start = _first_child_start(node, child)
                if start is None:
                    continue
                instant = start
            elif key is not None:
                value = seconds_value(attributes.get(key))
                if value is None:
                    continue
                if match and not _carries(match, node, node is root):
                    continue
                base = node.start if anchor is None else _anchor_end(node, anchor)
                if base is None:
                    continue
                instant = base + round(value * 1e9)
            else:
                if by_id is None:
                    by_id = {}
                    for span in spans:
                        by_id.setdefault(span.span_id, span)
                span = by_id[node.span_id]
                at = next((t for name, t in span.events if name in names), None)
                if at is None or (match and not _carries(match, node, node is root)):
                    continue
                instant = at + (node.start - span.start_ns)  # shifted with the span
            node.mark = instant
            candidate = (node.depth, node.start, instant, node.span_id)
            if best is None or candidate < best:
                best = candidate
                best_mark = index
            break
    if best is None:
        return None
    return _FirstToken(max(best[2], root.start), best_mark, best[3])


def _carries(match: tuple[Selector, ...], node: Node, is_root: bool) -> bool:
    return any(
        sel.matches_shape(node.name, node.kind, node.service, is_root)
        and sel.matches_attributes(node.attributes)
        for sel in match
    )


def _response_end(tree: Tree, span_id: str) -> _FirstToken | None:
    """The end of span `span_id` as the first token (mark -1): a response that came whole.
    That span is done there, as a marked span is at its mark."""
    for node in tree.nodes:
        if node.span_id == span_id and not node.virtual:
            node.mark = node.end
            return _FirstToken(max(node.end, tree.root.start), -1, span_id)
    return None


def _first_child_start(node: Node, child: Selector) -> int | None:
    """The start of the earliest-starting child span that matches `child` (the first of a
    server's response-body sends), or None unless two or more children match: a response
    sent whole is one body send, and its start is the whole answer, not a first token."""
    found: int | None = None
    matched = 0
    for kid in node.children:
        if (
            not kid.virtual
            and child.matches_shape(kid.name, kid.kind, kid.service, False)
            and child.matches_attributes(kid.attributes)
        ):
            matched += 1
            if found is None or kid.start < found:
                found = kid.start
    return found if matched > 1 else None


def _anchor_end(node: Node, anchor: Selector) -> int | None:
    """The end of the latest-starting child span that matches `anchor` (a retried request
    leaves several: the last one answered), or None when no child matches."""
    found: Node | None = None
    for child in node.children:
        if (
            not child.virtual
            and anchor.matches_shape(child.name, child.kind, child.service, False)
            and anchor.matches_attributes(child.attributes)
            and (found is None or (child.start, child.end) > (found.start, found.end))
        ):
            found = child
    return None if found is None else found.end
