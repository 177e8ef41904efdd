# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False
"""The evaluator's fast path, compiled: one trace's spans in, its `Judged` out.

It takes the steps of `attribution.assemble`, `evaluate._first_token`,
`attribution.attribute_window`, `Evaluator._judge` and `Evaluator._verdict` in that order
(DESIGN §5), over C arrays instead of a `Node` per span. What it cannot judge exactly in
64-bit integers (times beyond ±2**62 ns, a window of 2**53 ns or more, a mark too far out)
and traces whose spans sit in a parent cycle it hands back (`HANDBACK`): the tree judges
those. Tests hold the two to identical judgements
(tests/collector/judging/test_compiled_path.py).

`cdivision` is on: every `//` and `%` here has non-negative operands, where C's division
and Python's agree.
"""

from cpython.dict cimport PyDict_Contains, PyDict_GetItem, PyDict_SetItem
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.sequence cimport PySequence_Contains
from cpython.object cimport (
    Py_EQ,
    Py_GT,
    Py_LT,
    PyObject,
    PyObject_GenericSetAttr,
    PyObject_Hash,
    PyObject_RichCompareBool,
)
from libc.math cimport isfinite, rint
from libc.stdint cimport int64_t

import dataclasses
import itertools

from ..budget.model import WhenAbsent, attr_text
from ..budget.recognize import (
    ATTRIBUTE_KEYS,
    EVENT_NAMES,
    LIBRARIES,
    OPENLIT_SDK,
    SCOPE_PREFIXES,
    Instrumentation,
)
from ..spans import Span, SpanKind, same_host, seconds_value
from .llm_calls import (
    ASGI_EVENT,
    COUNTS,
    INVOCATION_PARAMETERS,
    LLM_OPERATIONS,
    LLM_REQUEST_TYPE,
    MODEL_KEYS,
    OPENINFERENCE_KIND,
    STREAM_FLAGS,
    LlmRequest,
    marked_by,
    request_of,
    streamed,
)
from .stage_table import PHASES
from .verdict import SEVERITY, StageResult, Status, Verdict
from .verdict_rules import (
    EXACT_BELOW_NS,
    HALF_UNIT_NS,
    UNIT_NS,
    blame,
    carried_attributes,
    round_ms,
)
from spanbudget.common.semconv import (
    GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
    GEN_AI_LATENCY_TIME_IN_QUEUE,
    GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN,
    GEN_AI_OPERATION_NAME,
    GEN_AI_REQUEST_MODEL,
    VLLM_PHASE_SPANS,
    VLLM_REQUEST_SPAN,
)


class _Handback:
    """The type of `HANDBACK`."""

    __slots__ = ()


HANDBACK = _Handback()  # judge()'s answer for a trace the Python paths must judge

cdef int64_t _LIMIT_NS = 1LL << 62  # node times stay inside ±_LIMIT_NS: no sum overflows
cdef int64_t _EXACT_NS = 1LL << 53  # below it an int64 converts to a double exactly
# verdict_rules' constants, as C integers.
cdef int64_t _UNIT_NS = UNIT_NS
cdef int64_t _HALF_UNIT_NS = HALF_UNIT_NS
cdef int64_t _ROUND_EXACT_BELOW_NS = EXACT_BELOW_NS

cdef object _PRODUCER = SpanKind.PRODUCER
cdef object _CONSUMER = SpanKind.CONSUMER
cdef object _CLIENT = SpanKind.CLIENT
cdef object _SERVER = SpanKind.SERVER
cdef object _OK = Status.OK
cdef object _WARN = Status.WARN
cdef object _OVERRUN = Status.OVERRUN
cdef object _ABSENT = Status.ABSENT
cdef object _UNMEASURED = Status.UNMEASURED
cdef object _ERROR = Status.ERROR
cdef object _INCOMPLETE = Status.INCOMPLETE
cdef object _UNMEASURED_WHEN_ABSENT = WhenAbsent.UNMEASURED
cdef object _new = object.__new__

# The frozen dataclasses are filled slot by slot, as object.__setattr__ does, without
# their generated __init__ (a third of a verdict's cost). CompiledJudge checks at start
# that these still name every field, in order.
cdef tuple _STAGE_FIELDS = ("name", "ms", "target_ms", "limit_ms", "status", "breakdown")
cdef tuple _VERDICT_FIELDS = (
    "trace_id", "budget", "status", "ttft_ms", "total_target_ms", "total_limit_ms",
    "total_status", "stages", "unattributed_ms", "blame", "overrun_ms", "skew_adjusted_ms",
    "attributes", "evaluated_at", "damaged", "first_token", "instrumentation", "response_ms",
)
cdef tuple _JUDGED_FIELDS = (
    "verdict", "root_span_id", "span_stages", "first_token_ns", "tree", "first_token_mark",
    "first_token_span",
)
cdef tuple _REQUEST_FIELDS = (
    "calls", "streamed", "response_end", "attributes", "missing_parents",
)


cdef struct Row:
    # One input span, by its position in the list.
    int64_t start
    int64_t end
    Py_ssize_t parent  # its parent's position; -1: parentless; -2: a repeat of an earlier id
    Py_ssize_t kids_at  # its children's positions: kid_rows[kids_at : kids_at + kid_count]
    Py_ssize_t kid_count
    Py_ssize_t node  # its node, once visited


cdef struct Node:
    # One node of the assembled trace, depth-first, parents before children.
    Py_ssize_t row  # the span's position; -1 for a vLLM phase
    int phase  # a phase's index in PHASES
    Py_ssize_t parent  # -1 for the root
    int64_t start  # skew-adjusted; clipped by attribute()
    int64_t end
    int64_t reach  # the end of the latest streamed SERVER child (rule 3b), else `end`
    int64_t mark  # its own first-token instant (rule 2), when `has_mark`
    bint has_mark
    int64_t delta  # start minus the span's own start: the shift its subtree inherits
    int64_t unclipped  # its start before attribute() clipped it
    Py_ssize_t depth
    int stage  # index into the budget's stages; -1: none
    bint producer
    bint consumer
    bint client
    bint server
    Py_ssize_t kids_at  # its children: kid_nodes[kids_at : kids_at + kid_count]
    Py_ssize_t kid_count
    Py_ssize_t walkable  # how many of them the walk may enter, in walk[kids_at:], ranked
    int64_t self_ns
    bint on_path


cdef struct Frame:
    # A step of the critical-path walk: at `node`, with the cursor at `cursor`, the next
    # of its ranked children to consider being `index`.
    Py_ssize_t node
    int64_t cursor
    Py_ssize_t index


cdef enum Outcome:
    DONE = 0
    GIVE_BACK = 1  # hand the trace back to the Python paths
    # -1: a Python exception is set


cdef inline bint _time_ns(object value, int64_t* out) except -1:
    """Whether `value` is an int inside ±_LIMIT_NS, then in `out` (only an int: Cython
    would truncate a float, where Python keeps its fraction)."""
    if type(value) is not int:
        return False
    try:
        out[0] = value
    except OverflowError:
        return False
    return not _outside(out[0])


cdef inline bint _outside(int64_t value) noexcept:
    return value <= -_LIMIT_NS or value >= _LIMIT_NS


cdef inline object _get(object mapping, object key):
    cdef PyObject* found
    if type(mapping) is dict:
        found = PyDict_GetItem(mapping, key)
        return None if found is NULL else <object>found
    # Another mapping (the wire reader's compact `Attributes`): through its C slots, which
    # `mapping.get`, a method looked up and called, would cost twice.
    return mapping[key] if PySequence_Contains(mapping, key) else None


cdef inline bint _seconds(object value, double* out) except -1:
    """`spans.seconds_value`: 1 and the seconds in `out` when `value` says any."""
    cdef double seconds
    if type(value) is float:
        seconds = <double>value
    elif type(value) is int:
        try:
            seconds = <double>value
        except OverflowError:
            return 0
    else:  # a bool, a subclass, anything else: as the Python function reads it
        value = seconds_value(value)
        if value is None:
            return 0
        seconds = <double>value
    if seconds >= 0 and isfinite(seconds * 1e9):
        out[0] = seconds
        return 1
    return 0


cdef inline int _to_ns(double seconds, int64_t* out) noexcept:
    """`round(seconds * 1e9)` for a finite, non-negative product; GIVE_BACK when it
    would not stay inside the limit."""
    cdef double ns = rint(seconds * 1e9)  # ties to even, as Python's round()
    if ns >= <double>_LIMIT_NS:
        return GIVE_BACK
    out[0] = <int64_t>ns
    return DONE


include "../_slots.pxi"


cdef inline object _fill(object cls, tuple offsets, tuple values):
    """A new `cls` with `values` in the slots at `offsets` (`_slot_offsets` of its fields)."""
    obj = _new(cls)
    cdef Py_ssize_t i
    for i in range(len(offsets)):
        _set_slot(obj, offsets[i], values[i])
    return obj


cdef dict _FIELDS_OF = {}  # class -> its dataclass fields' names, in order, and their slots


def evolve(obj, **changes):
    """`dataclasses.replace(obj, **changes)`, slot by slot as `_fill` makes a verdict: for
    the frozen slotted dataclasses of judging (no `__post_init__`, every field in
    `__init__`), at a fifth of `replace`'s cost, on every judged trace."""
    cls = type(obj)
    known = _FIELDS_OF.get(cls)
    if known is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
        known = _FIELDS_OF[cls] = (names, _slot_offsets(cls, names))
    cdef tuple fields = known[0]
    cdef Py_ssize_t used = 0
    cdef PyObject* value
    cdef list values = []
    for name in fields:
        value = PyDict_GetItem(changes, name)
        if value is NULL:
            values.append(getattr(obj, name))
        else:
            values.append(<object>value)
            used += 1
    if used != len(changes):
        unknown = sorted(set(changes) - set(fields))
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    return _fill(cls, known[1], tuple(values))


cdef class CompiledJudge:
    """Judges traces against one budget, as `Evaluator` does on its fast path.

    `table` is the evaluator's compiled selectors (its memo of decisions is shared),
    `marks` its first-token marks as `evaluate._mark_table` gives them, `sources` what a
    verdict's `first_token` says of each mark (source, description, exact), `walks` the
    compiled `llm_calls.reading` of the marks, and `judged` the `Judged` class
    (evaluate.py imports this module, so it cannot import that).
    """

    cdef object budget
    cdef tuple stage_at, verdict_at, judged_at, request_at  # the classes' slots (`_fill`)
    cdef object first_token_marks
    cdef list sources
    cdef object walks
    cdef dict memo
    cdef object decide
    cdef object phases
    cdef tuple marks
    cdef tuple names
    cdef tuple stages
    cdef Py_ssize_t stage_count
    cdef object judged
    cdef frozenset mark_keys, mark_events  # a span carrying one is an LLM call (`scan`)

    def __init__(self, budget, table, tuple marks, list sources, walks, judged):
        for cls, fields in (
            (StageResult, _STAGE_FIELDS),
            (Verdict, _VERDICT_FIELDS),
            (judged, _JUDGED_FIELDS),
            (LlmRequest, _REQUEST_FIELDS),
        ):
            if tuple(f.name for f in dataclasses.fields(cls)) != fields:
                raise RuntimeError(f"{cls.__name__}'s fields changed: update _judge.pyx")
        self.stage_at = _slot_offsets(StageResult, _STAGE_FIELDS)
        self.verdict_at = _slot_offsets(Verdict, _VERDICT_FIELDS)
        self.judged_at = _slot_offsets(judged, _JUDGED_FIELDS)
        self.request_at = _slot_offsets(LlmRequest, _REQUEST_FIELDS)
        self.budget = budget
        self.first_token_marks = budget.first_token
        self.sources = sources
        self.walks = walks
        self.memo = table.memo
        self.decide = table.decision
        self.phases = table.phases
        self.marks = marks
        self.stages = tuple(budget.stages)
        self.names = tuple(stage.name for stage in self.stages)
        self.stage_count = len(self.stages)
        self.judged = judged
        self.mark_keys, self.mark_events = marked_by(budget.first_token)

    def judge(self, spans, evaluated_at):
        """The trace's `Judged`, None when no span claims a stage, or `HANDBACK`."""
        return self._judge_trace(list(spans), evaluated_at, False)[0]

    def judge_reading(self, spans, evaluated_at):
        """`judge`, and `read` of the trace it judged (the first token's carrier that of
        the `Judged`) where the judge's own index of the spans answers it: most traces,
        whose calls do not tell whether they streamed; None for the request where
        `read` must. A pair."""
        return self._judge_trace(list(spans), evaluated_at, True)

    cdef tuple _judge_trace(self, list spans, object evaluated_at, bint reading):
        # `spans` is its own list: the caller's could change under it.
        if not spans:
            return None, None
        cdef _Trace trace = _Trace(self, spans)
        cdef int outcome = trace.assemble()
        if outcome == GIVE_BACK:
            return HANDBACK, None
        if not trace.any_matched():
            return None, None
        cdef int64_t first_token = 0
        cdef bint found = False
        cdef Py_ssize_t mark = -1, marked = -1
        outcome = trace.first_token(&first_token, &found, &mark, &marked)
        if outcome == GIVE_BACK:
            return HANDBACK, None
        cdef Node* root = &trace.nodes[0]
        cdef int64_t window_start = root.start
        cdef int64_t window_end = first_token if found else root.end
        if window_end - window_start >= _EXACT_NS:
            return HANDBACK, None
        cdef int64_t uncovered = trace.attribute(window_start, window_end)
        judged = self._judged(trace, uncovered, window_start, window_end, found, evaluated_at)
        if found:  # which mark gave the first token, on which span
            PyObject_GenericSetAttr(judged, "first_token_mark", mark)
            PyObject_GenericSetAttr(judged, "first_token_span", trace.span(marked).span_id)
        if not reading:
            return judged, None
        return judged, trace.request(trace.nodes[marked].row if found else -1)

    def read(self, spans, first_token_span):
        """`llm_calls.read_request` of a judged trace (its first token carried by span
        `first_token_span`, if any), compiled where nothing tells whether the calls
        streamed (most traces); the rest goes to `llm_calls.request_of` with this first
        pass."""
        scanned = self.walks.scan(spans)
        by_id, children, calls, call_ids, outermost, told, orphans = scanned
        missing = orphans - 1 if orphans > 1 else 0  # the root's parent is not there either
        if not calls:
            return _fill(LlmRequest, self.request_at, (0, None, None, {}, missing))
        if told:
            return request_of(spans, first_token_span, self.first_token_marks, scanned, self.walks)
        # Nothing tells: no call says, and no server shows its sends (the carrier's, or
        # those of the servers that could have carried one: `llm_calls._sends_tell`), so
        # whether the calls streamed is not known.
        last = best = None  # the outermost call that ended last, as `max` picks it
        for call in <list>outermost:
            key = (call.end_ns, call.span_id)
            if last is None or PyObject_RichCompareBool(key, best, Py_GT):
                last, best = call, key
        chosen = _call_of(first_token_span, call_ids, by_id)
        if chosen is None:  # `llm_calls._chosen` without a streamed call: the last to end
            chosen = last
        attributes = call_attributes(chosen, calls_below(chosen, call_ids, children))
        return _fill(LlmRequest, self.request_at, (
            len(<list>calls), None, (last.span_id, last.end_ns), attributes, missing
        ))

    def settle(self, judged, request, spans, instrumentation):
        """`judged` with its verdict as `llm_calls.settle` makes it where that changes only
        the verdict's attributes, damage, first token and instrumentation (an LLM call not
        known to have answered whole, and a first token); None for the rest, which
        `Evaluator.judge` settles in Python."""
        verdict = judged.verdict
        if request.calls == 0 or request.streamed is False or verdict.status is _INCOMPLETE:
            return None
        attributes = {**verdict.attributes, **request.attributes}
        damaged = verdict.damaged
        if request.missing_parents:
            damaged = {**(damaged or {}), "missing_parent": request.missing_parents}
        settled = _fill(Verdict, self.verdict_at, (
            verdict.trace_id,
            verdict.budget,
            verdict.status,
            verdict.ttft_ms,
            verdict.total_target_ms,
            verdict.total_limit_ms,
            verdict.total_status,
            verdict.stages,
            verdict.unattributed_ms,
            verdict.blame,
            verdict.overrun_ms,
            verdict.skew_adjusted_ms,
            attributes,
            verdict.evaluated_at,
            damaged,
            self._source(judged, spans),
            instrumentation,
            verdict.response_ms,
        ))
        return _fill(self.judged, self.judged_at, (
            settled,
            judged.root_span_id,
            judged.span_stages,
            judged.first_token_ns,
            judged.tree,
            judged.first_token_mark,
            judged.first_token_span,
        ))

    cdef object _source(self, object judged, object spans):
        """`Evaluator._source`: the verdict's `first_token`."""
        mark = judged.first_token_mark
        if judged.first_token_ns is None or mark is None:
            return None
        carrier = judged.first_token_span
        name = ""
        for span in spans:
            if span.span_id == carrier:
                name = span.name
                break
        if mark < 0:
            return {"source": "response end", "mark": "the call's end", "span": name, "exact": True}
        source, described, exact = self.sources[mark]
        return {"source": source, "mark": described, "span": name, "exact": exact}

    cdef int stage_index(self, object name) except -2:
        """The index of the stage called `name`, -1 for "" (decisions hold the budget's
        own name objects, so identity almost always decides)."""
        if not name:
            return -1
        cdef Py_ssize_t i
        for i in range(self.stage_count):
            if self.names[i] is name:
                return i
        for i in range(self.stage_count):
            if self.names[i] == name:
                return i
        return -1

    cdef int own_stage(self, object span, object name, bint is_root) except -2:
        """`StageTable.stage`: the first stage with a matching selector, -1 for none."""
        kind, service = _field(span, _KIND_AT, "kind"), _field(span, _SERVICE_AT, "service")
        key = (name, kind, service, is_root)
        cdef PyObject* kept = PyDict_GetItem(self.memo, key)
        decision = self.decide(name, kind, service, is_root) if kept is NULL else <object>kept
        if type(decision) is str:
            return self.stage_index(decision)
        return self.stage_index(_resolve(decision, _field(span, _ATTRIBUTES_AT, "attributes")))

    cdef object _judged(
        self, _Trace trace, int64_t uncovered, int64_t window_start, int64_t window_end,
        bint found, object evaluated_at,
    ):
        """`Evaluator._judge` from the attribution on, and `_verdict`."""
        cdef Py_ssize_t s, i, count = self.stage_count
        cdef Node* node
        breakdowns = trace.tally(uncovered)
        trace.apportion(window_end - window_start)
        results = []
        statuses = []
        total_target = self.budget.total_target_ms
        total_limit = self.budget.total_limit_ms
        for s in range(count):
            stage = self.stages[s]
            target, limit = stage.target_ms, stage.limit_ms
            if trace.matched[s]:
                ms = trace.units[s] / 100.0
                status = _band(ms, target, limit)
                breakdown = {}
                if breakdowns[s] is not None:
                    for name, ns in (<dict>breakdowns[s]).items():
                        breakdown[name] = self._round(ns)
            elif stage.when_absent is _UNMEASURED_WHEN_ABSENT:
                total_target -= target
                total_limit -= limit
                ms, status, breakdown = None, _UNMEASURED, {}
            else:
                ms, status, breakdown = 0.0, _ABSENT, {}
            result = (stage.name, ms, target, limit, status, breakdown)
            results.append(_fill(StageResult, self.stage_at, result))
            statuses.append(status)

        if found:
            ttft_ms = self._round(window_end - window_start)
            total_status = _band(ttft_ms, total_target, total_limit)
            overrun_ms = round(max(0.0, ttft_ms - total_limit), 2)
        else:
            ttft_ms, total_status, overrun_ms = None, _INCOMPLETE, 0.0
        if trace.error_on_path():
            verdict_status = _ERROR
        elif not found:
            verdict_status = _INCOMPLETE
        else:  # the worst of the total and the stages; the first of equals
            verdict_status = total_status
            worst = SEVERITY[total_status]
            for status in statuses:
                if SEVERITY[status] > worst:
                    verdict_status, worst = status, SEVERITY[status]

        root = trace.span(0)
        verdict = _fill(Verdict, self.verdict_at, (
            trace.spans[0].trace_id,
            self.budget.name,
            verdict_status,
            ttft_ms,
            total_target,
            total_limit,
            total_status,
            tuple(results),
            trace.units[count] / 100.0,
            # `blame` finds nothing where nothing went over its limit: most traces.
            blame(results, total_status)
            if total_status is _OVERRUN or _OVERRUN in statuses
            else (),
            overrun_ms,
            self._round(trace.skew_ns),
            carried_attributes(root.attributes),
            evaluated_at,
            None,  # damaged, first_token, instrumentation, response_ms: the evaluator's
            None,  # own step after judging (Evaluator.judge) fills them in
            None,
            None,
        ))
        span_stages = {}
        for i in range(trace.node_count):
            node = &trace.nodes[i]
            if node.stage >= 0 and node.row >= 0:
                PyDict_SetItem(span_stages, trace.span(i).span_id, self.names[node.stage])
        first_token_ns = window_end if found else None
        return _fill(self.judged, self.judged_at, (
            verdict, root.span_id, span_stages, first_token_ns, None, None, None
        ))

    cdef object _round(self, int64_t ns):
        """`verdict_rules.round_ms`, its integer branch in C."""
        if 0 <= ns < _ROUND_EXACT_BELOW_NS and ns % _UNIT_NS != _HALF_UNIT_NS:
            return ((ns + _HALF_UNIT_NS) // _UNIT_NS) / 100.0
        return round_ms(ns)


cdef object _resolve(tuple left, object attributes):
    """`stage_table.resolve` in C, as it runs for most spans: the stage a span's
    attributes pick from `left`, or ""."""
    for stage, checks in left:
        for key, accepted in checks:
            value = _get(attributes, key)
            if value is None:
                break
            if type(value) is not str:
                value = attr_text(value)
            if value not in accepted:
                break
        else:
            return stage
    return ""


cdef object _band(double ms, double target, double limit):
    if ms <= target:
        return _OK
    return _WARN if ms <= limit else _OVERRUN


cdef class _Trace:
    """One trace being judged: its spans as `Row`s, its nodes as `Node`s."""

    cdef CompiledJudge judge
    cdef list spans
    cdef Py_ssize_t span_count
    cdef Py_ssize_t node_count
    cdef Py_ssize_t capacity
    cdef Row* rows
    cdef Node* nodes
    cdef Py_ssize_t* slots  # open addressing on span ids: a position, or -1
    cdef Py_ssize_t slot_mask
    cdef Py_ssize_t* kid_rows
    cdef Py_ssize_t* kid_nodes
    cdef Py_ssize_t* walk
    cdef Py_ssize_t* scratch  # the depth-first stack, then the sort's buffer
    cdef Frame* frames  # the critical-path walk's stack
    cdef char* matched  # per stage: whether a node claims it
    cdef int64_t* parts  # per stage, then unattributed: for CompiledJudge._judged
    cdef int64_t* units
    cdef char* taken
    cdef int64_t skew_ns
    cdef Py_ssize_t orphans  # spans whose parent is none or not in the trace (`scan`'s)
    cdef bint irregular  # a repeated span id, or a span its own parent: `read` reads it

    def __cinit__(self, CompiledJudge judge, list spans):
        cdef Py_ssize_t n, size
        self.judge = judge
        self.spans = spans
        n = len(spans)
        self.span_count = n
        self.capacity = 5 * n  # each span, and four phases for each vLLM request
        size = 4
        while size < 2 * n:
            size *= 2
        self.slot_mask = size - 1
        self.rows = <Row*>PyMem_Malloc(n * sizeof(Row))
        self.nodes = <Node*>PyMem_Malloc(self.capacity * sizeof(Node))
        self.slots = <Py_ssize_t*>PyMem_Malloc(size * sizeof(Py_ssize_t))
        self.kid_rows = <Py_ssize_t*>PyMem_Malloc(n * sizeof(Py_ssize_t))
        self.kid_nodes = <Py_ssize_t*>PyMem_Malloc(self.capacity * sizeof(Py_ssize_t))
        self.walk = <Py_ssize_t*>PyMem_Malloc(self.capacity * sizeof(Py_ssize_t))
        self.scratch = <Py_ssize_t*>PyMem_Malloc(self.capacity * sizeof(Py_ssize_t))
        self.frames = <Frame*>PyMem_Malloc((self.capacity + 1) * sizeof(Frame))
        self.matched = <char*>PyMem_Malloc(judge.stage_count + 1)
        self.parts = <int64_t*>PyMem_Malloc((judge.stage_count + 1) * sizeof(int64_t))
        self.units = <int64_t*>PyMem_Malloc((judge.stage_count + 1) * sizeof(int64_t))
        self.taken = <char*>PyMem_Malloc(judge.stage_count + 1)
        if (
            self.rows is NULL or self.nodes is NULL or self.slots is NULL
            or self.kid_rows is NULL or self.kid_nodes is NULL or self.walk is NULL
            or self.scratch is NULL or self.frames is NULL or self.matched is NULL
            or self.parts is NULL or self.units is NULL or self.taken is NULL
        ):
            raise MemoryError()
        cdef Py_ssize_t i
        for i in range(size):
            self.slots[i] = -1
        for i in range(judge.stage_count):
            self.matched[i] = 0
        self.node_count = 0
        self.skew_ns = 0
        self.orphans = 0
        self.irregular = False

    def __dealloc__(self):
        PyMem_Free(self.rows)
        PyMem_Free(self.nodes)
        PyMem_Free(self.slots)
        PyMem_Free(self.kid_rows)
        PyMem_Free(self.kid_nodes)
        PyMem_Free(self.walk)
        PyMem_Free(self.scratch)
        PyMem_Free(self.frames)
        PyMem_Free(self.matched)
        PyMem_Free(self.parts)
        PyMem_Free(self.units)
        PyMem_Free(self.taken)

    cdef inline object span(self, Py_ssize_t node):
        return self.spans[self.nodes[node].row]

    cdef object name(self, Py_ssize_t node):
        if self.nodes[node].row < 0:
            return PHASES[self.nodes[node].phase]
        return self.span(node).name

    cdef object node_id(self, Py_ssize_t node):
        cdef Node* n = &self.nodes[node]
        if n.row >= 0:
            return self.spans[n.row].span_id
        return f"{self.span(n.parent).span_id}:{PHASES[n.phase]}"

    cdef bint any_matched(self):
        cdef Py_ssize_t s
        for s in range(self.judge.stage_count):
            if self.matched[s]:
                return True
        return False

    cdef list tally(self, int64_t uncovered):
        """Each stage's time on the critical path into `parts` (`unattributed` last), and
        its breakdown by node name, in the order the names first appear: a dict per stage
        (None for a stage with none)."""
        cdef Py_ssize_t i, s, count = self.judge.stage_count
        cdef Node* node
        for s in range(count):
            self.parts[s] = 0
        self.parts[count] = uncovered
        breakdowns = [None] * count
        for i in range(self.node_count):
            node = &self.nodes[i]
            if node.self_ns == 0:
                continue
            if node.stage < 0:
                self.parts[count] += node.self_ns
                continue
            self.parts[node.stage] += node.self_ns
            parts_of = breakdowns[node.stage]
            if parts_of is None:
                parts_of = breakdowns[node.stage] = {}
            name = self.name(i)
            before = _get(parts_of, name)
            parts_of[name] = node.self_ns if before is None else before + node.self_ns
        return breakdowns

    cdef void apportion(self, int64_t total_ns) noexcept:
        """`verdict_rules.apportion`: `parts` in whole 0.01 ms `units` that add up to the
        total as `round_ms` shows it: each floored, and the units left over to the largest
        remainders, the first of equals first. `total_ns` is below 2**53."""
        cdef Py_ssize_t s, best, count = self.judge.stage_count + 1
        cdef int64_t left = <int64_t>rint(<double>self.judge._round(total_ns) * 100.0)
        for s in range(count):
            self.units[s] = self.parts[s] // _UNIT_NS
            self.taken[s] = 0
            left -= self.units[s]
        while left > 0:
            best = -1
            for s in range(count):
                if not self.taken[s] and (
                    best < 0 or self.parts[s] % _UNIT_NS > self.parts[best] % _UNIT_NS
                ):
                    best = s
            if best < 0:
                break
            self.taken[best] = 1
            self.units[best] += 1
            left -= 1

    cdef bint error_on_path(self) except -1:
        """Whether a span on the critical path failed."""
        cdef Py_ssize_t i
        for i in range(self.node_count):
            if self.nodes[i].on_path and self.nodes[i].row >= 0 and self.span(i).error:
                return True
        return False

    # Assembly: attribution.assemble.

    cdef Py_ssize_t find(self, object span_id) except -2:
        """The first position of `span_id` among the spans, or -1."""
        cdef Py_hash_t h = PyObject_Hash(span_id)
        cdef Py_ssize_t slot = <Py_ssize_t>(<size_t>h & <size_t>self.slot_mask)
        cdef Py_ssize_t at
        while True:
            at = self.slots[slot]
            if at < 0:
                return -1
            if PyObject_RichCompareBool(self.spans[at].span_id, span_id, Py_EQ):
                return at
            slot = (slot + 1) & self.slot_mask

    cdef int index_rows(self) except -1:
        """Every span's times and parent; a repeated id counts once, its first copy."""
        cdef Py_ssize_t n = self.span_count, pos, slot, at, parent
        cdef Py_hash_t h
        cdef Row* row
        cdef list spans = self.spans
        for pos in range(n):
            span_id = _field(spans[pos], _SPAN_ID_AT, "span_id")
            h = PyObject_Hash(span_id)
            slot = <Py_ssize_t>(<size_t>h & <size_t>self.slot_mask)
            row = &self.rows[pos]
            row.parent = -1
            row.kid_count = 0
            while True:
                at = self.slots[slot]
                if at < 0:
                    self.slots[slot] = pos
                    break
                if PyObject_RichCompareBool(spans[at].span_id, span_id, Py_EQ):
                    row.parent = -2
                    self.irregular = True
                    break
                slot = (slot + 1) & self.slot_mask
        for pos in range(n):
            row = &self.rows[pos]
            if row.parent == -2:
                continue
            span = spans[pos]
            if not (
                _time_ns(_field(span, _START_AT, "start_ns"), &row.start)
                and _time_ns(_field(span, _END_AT, "end_ns"), &row.end)
            ):
                return GIVE_BACK
            parent_id = _field(span, _PARENT_AT, "parent_span_id")
            if parent_id is None:
                self.orphans += 1
            else:
                parent = self.find(parent_id)
                if parent < 0:
                    self.orphans += 1
                elif parent == pos:
                    self.irregular = True
                else:
                    row.parent = parent
                    self.rows[parent].kid_count += 1
        # Children in the order of their first appearance.
        at = 0
        for pos in range(n):
            self.rows[pos].kids_at = at
            at += self.rows[pos].kid_count
            self.rows[pos].kid_count = 0
        for pos in range(n):
            parent = self.rows[pos].parent
            if parent >= 0:
                row = &self.rows[parent]
                self.kid_rows[row.kids_at + row.kid_count] = pos
                row.kid_count += 1
        return DONE

    cdef int assemble(self) except -1:
        """Place every span under its parent, depth-first from the root, shifting children
        on another host into their parents, noting streamed responses and adding vLLM's
        phases; GIVE_BACK when spans sit in a parent cycle."""
        cdef Py_ssize_t n = self.span_count, pos, root = -1, parentless = 0, unique = 0
        cdef Py_ssize_t i, parent
        cdef Row* row
        if self.index_rows() == GIVE_BACK:
            return GIVE_BACK
        for pos in range(n):
            row = &self.rows[pos]
            if row.parent == -2:
                continue
            unique += 1
            if row.parent == -1:
                parentless += 1
                if root < 0 or self.earlier_root(pos, root):
                    root = pos
        if root < 0:
            return GIVE_BACK
        if self.add_span(root, -1) == GIVE_BACK:
            return GIVE_BACK
        # The stack holds positions; their parent node is the row's node or, for the
        # parentless spans the root adopts, the root.
        cdef Py_ssize_t* stack = self.scratch
        cdef Py_ssize_t top = 0, visited = 1
        if parentless > 1:
            for pos in range(n - 1, -1, -1):
                if pos != root and self.rows[pos].parent == -1:
                    stack[top] = pos
                    top += 1
        row = &self.rows[root]
        for i in range(row.kid_count - 1, -1, -1):
            stack[top] = self.kid_rows[row.kids_at + i]
            top += 1
        while top > 0:
            top -= 1
            pos = stack[top]
            parent = self.rows[pos].parent
            if self.add_span(pos, 0 if parent < 0 else self.rows[parent].node) == GIVE_BACK:
                return GIVE_BACK
            visited += 1
            row = &self.rows[pos]
            for i in range(row.kid_count - 1, -1, -1):
                stack[top] = self.kid_rows[row.kids_at + i]
                top += 1
        if visited != unique:
            return GIVE_BACK  # spans in a parent cycle: the tree adopts them
        self.link_kids()
        return DONE

    cdef bint earlier_root(self, Py_ssize_t pos, Py_ssize_t than) except -1:
        """Whether `pos` comes before `than` as root: earlier start, longer, lower id."""
        cdef list spans = self.spans
        a, b = spans[pos], spans[than]
        a_start, b_start = a.start_ns, b.start_ns
        if a_start != b_start:
            return a_start < b_start
        a_end, b_end = a.end_ns, b.end_ns
        if a_end != b_end:
            return a_end > b_end
        return PyObject_RichCompareBool(a.span_id, b.span_id, Py_LT)

    cdef int add_span(self, Py_ssize_t pos, Py_ssize_t parent) except -1:
        """The node of span `pos` under node `parent` (-1: the root)."""
        cdef Py_ssize_t index = self.node_count
        cdef Node* node = &self.nodes[index]
        cdef Node* up
        cdef Row* row = &self.rows[pos]
        cdef int64_t start, end, duration, parent_duration, moved
        cdef int own
        span = self.spans[pos]
        name = _field(span, _NAME_AT, "name")
        node.row = pos
        node.phase = 0
        node.parent = parent
        node.kid_count = 0
        node.self_ns = 0
        node.on_path = False
        kind = _field(span, _KIND_AT, "kind")
        node.producer = kind is _PRODUCER
        node.consumer = kind is _CONSUMER
        node.client = kind is _CLIENT
        node.server = kind is _SERVER
        node.has_mark = False
        row.node = index
        self.node_count += 1
        if parent < 0:
            node.start, node.end, node.delta, node.depth = row.start, row.end, 0, 0
            node.reach = node.end
            own = self.judge.own_stage(span, name, True)
            node.stage = own
        else:
            up = &self.nodes[parent]
            up.kid_count += 1
            node.depth = up.depth + 1
            start = row.start + up.delta
            end = row.end + up.delta
            if _outside(start) or _outside(end):
                return GIVE_BACK
            up_span = self.spans[up.row]
            duration = end - start
            parent_duration = up.end - up.start
            if _outside(duration):
                return GIVE_BACK
            # Rule 3a, as attribution._skew_shift: only a child on another host moves.
            if (
                (start < up.start or (duration <= parent_duration and end > up.end))
                and not same_host(span.host, span.service, up_span.host, up_span.service)
            ):
                if duration > parent_duration:
                    moved = up.start
                else:
                    moved = up.start + (parent_duration - duration) // 2
                if _outside(moved - start) or _outside(self.skew_ns):
                    return GIVE_BACK
                self.skew_ns += moved - start if moved >= start else start - moved
                start = moved
                end = moved + duration
                if _outside(end):
                    return GIVE_BACK
            node.start, node.end, node.reach = start, end, end
            node.delta = start - row.start
            if _outside(node.delta):
                return GIVE_BACK
            # Rule 3b: a streamed response outlives the client span that waits on it.
            if node.server and up.client and up.start <= start < up.end < end and end > up.reach:
                up.reach = end
            own = self.judge.own_stage(span, name, False)
            node.stage = own if own >= 0 else up.stage
        if own >= 0:
            self.matched[own] = 1
        if name == VLLM_REQUEST_SPAN and not self.has_phase_spans(pos):
            return self.add_phases(index, span)
        return DONE

    cdef object request(self, Py_ssize_t carrier):
        """`CompiledJudge.read` of these spans, the first token carried by span number
        `carrier` (-1: none), over this trace's own index instead of `scan`'s dicts; None
        where `read` must read it: spans with a repeated id or their own parent, whose
        walks differ, and calls that tell whether they streamed (`llm_calls.request_of`)."""
        if self.irregular:
            return None
        cdef CompiledJudge judge = self.judge
        cdef list spans = self.spans
        cdef Py_ssize_t n = self.span_count, pos, up, steps, count = 0, last = -1, chosen = -1
        cdef Py_ssize_t missing = self.orphans - 1 if self.orphans > 1 else 0
        cdef bint sends = False, called
        cdef char* calls = <char*>PyMem_Malloc(n)
        if calls is NULL:
            raise MemoryError()
        try:
            for pos in range(n):  # `scan`'s first pass: which spans are calls
                span = spans[pos]
                attributes = _field(span, _ATTRIBUTES_AT, "attributes")
                called = _is_call(span, attributes, judge.mark_keys, judge.mark_events)
                calls[pos] = called
                count += called
                if not sends:
                    sends = _has(attributes, ASGI_EVENT)
            if count == 0:
                return _fill(LlmRequest, judge.request_at, (0, None, None, {}, missing))
            if sends:
                return None
            for pos in range(n):
                if calls[pos] and _tells(spans[pos]):
                    return None
            # Nothing tells. The outermost calls (none above them; all of them, where every
            # call has one above), and of those the last to end, as `max` picks it.
            for outer in (True, False):
                for pos in range(n):
                    if not calls[pos] or (outer and self.call_above(pos, calls)):
                        continue
                    if last < 0 or self.rows[pos].end > self.rows[last].end or (
                        self.rows[pos].end == self.rows[last].end
                        and PyObject_RichCompareBool(
                            _field(spans[pos], _SPAN_ID_AT, "span_id"),
                            _field(spans[last], _SPAN_ID_AT, "span_id"),
                            Py_GT,
                        )
                    ):
                        last = pos
                if last >= 0:
                    break
            # The call the first token came out of: the outermost at or above its carrier.
            up, steps = carrier, 0
            while up >= 0 and steps <= n:
                if calls[up]:
                    chosen = up
                up = self.rows[up].parent
                steps += 1
            if chosen < 0:
                chosen = last
            attributes = call_attributes(spans[chosen], self.calls_below(chosen, calls))
            last_span = spans[last]
            return _fill(LlmRequest, judge.request_at, (
                count, None, (last_span.span_id, last_span.end_ns), attributes, missing
            ))
        finally:
            PyMem_Free(calls)

    cdef bint call_above(self, Py_ssize_t pos, const char* calls) noexcept:
        """Whether a call is above span `pos` (`llm_calls._has_ancestor_in`)."""
        cdef Py_ssize_t up = self.rows[pos].parent, steps = 0
        while up >= 0 and steps < self.span_count:
            if calls[up]:
                return True
            up = self.rows[up].parent
            steps += 1
        return False

    cdef list calls_below(self, Py_ssize_t pos, const char* calls):
        """The calls under span `pos`, depth first in their order (`calls_below`)."""
        cdef list found = []
        cdef Py_ssize_t* pending = self.scratch  # free again: the walks are done
        cdef Py_ssize_t top = 0, at, i, steps = 0
        cdef Row* row = &self.rows[pos]
        for i in range(row.kid_count - 1, -1, -1):
            pending[top] = self.kid_rows[row.kids_at + i]
            top += 1
        while top > 0 and steps < self.span_count:
            top -= 1
            at = pending[top]
            steps += 1
            if calls[at]:
                found.append(self.spans[at])
            row = &self.rows[at]
            for i in range(row.kid_count - 1, -1, -1):
                pending[top] = self.kid_rows[row.kids_at + i]
                top += 1
        return found

    cdef bint has_phase_spans(self, Py_ssize_t pos) except -1:
        """`attribution._reads_phases`: vLLM's per-phase spans among the span's children."""
        cdef Row* row = &self.rows[pos]
        cdef Py_ssize_t i
        cdef list spans = self.spans
        for i in range(row.kid_count):
            if spans[self.kid_rows[row.kids_at + i]].name in VLLM_PHASE_SPANS:
                return True
        return False

    cdef int add_phases(self, Py_ssize_t index, object span) except -1:
        """`flat._add_phases`: vLLM's phases as children of node `index`."""
        attributes = _field(span, _ATTRIBUTES_AT, "attributes")
        cdef double ttft, queue = 0.0, prefill
        cdef int64_t ttft_ns, queue_ns, prefill_ns
        if not _seconds(_get(attributes, GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN), &ttft):
            return DONE
        if not _seconds(_get(attributes, GEN_AI_LATENCY_TIME_IN_QUEUE), &queue):
            queue = 0.0
        if not _seconds(_get(attributes, GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL), &prefill):
            prefill = ttft - queue if ttft - queue > 0.0 else 0.0
        if (
            _to_ns(ttft, &ttft_ns) == GIVE_BACK
            or _to_ns(prefill, &prefill_ns) == GIVE_BACK
            or _to_ns(queue, &queue_ns) == GIVE_BACK
        ):
            return GIVE_BACK
        cdef Node* node = &self.nodes[index]
        cdef int64_t bounds[5]
        bounds[0] = node.start
        bounds[3] = node.start + ttft_ns
        if bounds[3] > node.end:
            bounds[3] = node.end
        bounds[2] = bounds[3] - prefill_ns
        if bounds[2] < node.start:
            bounds[2] = node.start
        bounds[1] = bounds[2] - queue_ns
        if bounds[1] < node.start:
            bounds[1] = node.start
        bounds[4] = node.end
        stages = self.judge.phases(span.service)
        cdef int phase, stage
        cdef Node* child
        for phase in range(4):
            if bounds[phase + 1] <= bounds[phase]:
                continue
            stage = self.judge.stage_index(stages[phase])
            if stage >= 0:
                self.matched[stage] = 1
            node = &self.nodes[index]
            child = &self.nodes[self.node_count]
            self.node_count += 1
            node.kid_count += 1
            child.row = -1
            child.phase = phase
            child.parent = index
            child.start = bounds[phase]
            child.end = bounds[phase + 1]
            child.delta = 0
            child.depth = node.depth + 1
            child.stage = stage if stage >= 0 else node.stage
            child.reach = child.end
            child.has_mark = False
            child.producer = False
            child.consumer = False
            child.client = False
            child.server = False
            child.kid_count = 0
            child.self_ns = 0
            child.on_path = False
        return DONE

    cdef void link_kids(self) noexcept:
        """Each node's children, in the order they were placed."""
        cdef Py_ssize_t i, at = 0
        cdef Node* node
        for i in range(self.node_count):
            node = &self.nodes[i]
            node.kids_at = at
            at += node.kid_count
            node.kid_count = 0
        for i in range(1, self.node_count):
            node = &self.nodes[self.nodes[i].parent]
            self.kid_nodes[node.kids_at + node.kid_count] = i
            node.kid_count += 1

    # The first token: evaluate._first_token.

    cdef int first_token(
        self, int64_t* out, bint* found, Py_ssize_t* mark, Py_ssize_t* marked
    ) except -1:
        """The instant of the outermost node that carries a first-token mark, the index of
        that mark in the budget's list and the node's position; and each marked node's own
        instant in its `mark`."""
        cdef Py_ssize_t i, m, best_depth = 0, best_mark = -1, best_node = -1
        cdef int64_t best_start = 0, best_instant = 0, base, instant, at_ns, mark_ns
        cdef double seconds
        cdef bint have = False, anchored
        cdef Node* node
        for i in range(self.node_count):
            node = &self.nodes[i]
            if node.row < 0:
                continue
            span = self.spans[node.row]
            attributes = _field(span, _ATTRIBUTES_AT, "attributes")
            m = -1
            for key, names, anchor, match, child in self.judge.marks:
                m += 1
                if child is not None:
                    if match and not _carries(match, span, i == 0):
                        continue
                    if not self.first_child_start(i, child, &instant):
                        continue
                elif key is not None:
                    value = _get(attributes, key)
                    if value is None or not _seconds(value, &seconds):
                        continue
                    if match and not _carries(match, span, i == 0):
                        continue
                    if anchor is None:
                        base = node.start
                    else:
                        anchored = self.anchor_end(i, anchor, &base)
                        if not anchored:
                            continue
                    if _to_ns(seconds, &mark_ns) == GIVE_BACK:
                        return GIVE_BACK
                    instant = base + mark_ns
                else:
                    at = None
                    for event in span.events:
                        if event[0] in names:
                            at = event[1]
                            break
                    if at is None or (match and not _carries(match, span, i == 0)):
                        continue
                    if not _time_ns(at, &at_ns):
                        return GIVE_BACK
                    instant = at_ns + node.delta  # shifted with the span
                if _outside(instant):
                    return GIVE_BACK  # the window would not fit in 64 bits
                node.mark = instant
                node.has_mark = True
                if (
                    not have
                    or node.depth < best_depth
                    or (node.depth == best_depth and node.start < best_start)
                    or (
                        node.depth == best_depth
                        and node.start == best_start
                        and (
                            instant < best_instant
                            or (
                                instant == best_instant
                                and span.span_id < self.span(best_node).span_id
                            )
                        )
                    )
                ):
                    have = True
                    best_depth, best_start, best_instant = node.depth, node.start, instant
                    best_mark, best_node = m, i
                break
        if have:
            found[0] = True
            out[0] = best_instant if best_instant > self.nodes[0].start else self.nodes[0].start
            mark[0], marked[0] = best_mark, best_node
        return DONE

    cdef bint first_child_start(self, Py_ssize_t index, object child, int64_t* out) except -1:
        """The start of the earliest-starting child of `index` that matches `child` (the
        first of a server's response-body sends), as it stands after the skew shift; none
        unless two or more children match (a response sent whole is one body send)."""
        cdef Node* parent = &self.nodes[index]
        cdef Node* kid
        cdef Py_ssize_t k, matched = 0
        cdef int64_t start = 0
        for k in range(parent.kid_count):
            kid = &self.nodes[self.kid_nodes[parent.kids_at + k]]
            if self.kid_matches(kid, child):
                if matched == 0 or kid.start < start:
                    start = kid.start
                matched += 1
        out[0] = start
        return matched > 1

    cdef bint kid_matches(self, Node* kid, object selector) except -1:
        """Whether a child node is a span (not a missing parent's stand-in) that
        `selector` matches, as a child (never the root)."""
        if kid.row < 0:
            return False
        span = self.spans[kid.row]
        return selector.matches_shape(
            span.name, span.kind, span.service, False
        ) and selector.matches_attributes(span.attributes)

    cdef bint anchor_end(self, Py_ssize_t index, object anchor, int64_t* out) except -1:
        """The end of the latest-starting child span of `index` matching `anchor`."""
        cdef Node* parent = &self.nodes[index]
        cdef Node* kid
        cdef Py_ssize_t k
        cdef bint have = False
        cdef int64_t start = 0, end = 0
        for k in range(parent.kid_count):
            kid = &self.nodes[self.kid_nodes[parent.kids_at + k]]
            if self.kid_matches(kid, anchor) and (
                not have or kid.start > start or (kid.start == start and kid.end > end)
            ):
                have = True
                start, end = kid.start, kid.end
        out[0] = end
        return have

    # The critical path: attribution.attribute_window.

    cdef int64_t attribute(self, int64_t window_start, int64_t window_end) except? -1:
        """Clip to the window, rank each node's children, walk back from the window's
        end; set each node's `self_ns` and `on_path`; return the time no node covers."""
        cdef Node* root = &self.nodes[0]
        cdef Node* node
        cdef Node* kid
        cdef Py_ssize_t* ranked
        cdef Py_ssize_t i, k, m, child
        cdef int64_t low, high, start, end, clipped
        low = root.start if root.start > window_start else window_start
        if low > window_end:
            low = window_end
        root.start = low
        end = _own_end(root)
        end = end if end > low else low
        root.end = end if end < window_end else window_end
        for i in range(self.node_count):
            node = &self.nodes[i]
            node.walkable = 0
            if node.kid_count == 0:
                continue
            low, high = node.start, node.end
            m = 0
            for k in range(node.kid_count):
                child = self.kid_nodes[node.kids_at + k]
                kid = &self.nodes[child]
                start, end = kid.start, _own_end(kid)
                clipped = low if start < low else (high if start > high else start)
                kid.start = clipped
                kid.end = clipped if end < clipped else (high if end > high else end)
                kid.unclipped = start
                if (start >= high if start >= low else end <= low) or (
                    node.producer and kid.consumer
                ):
                    continue
                self.walk[node.kids_at + m] = child
                m += 1
            node.walkable = m
            if m > 1:
                self.rank(&self.walk[node.kids_at], m)
        cdef Frame* frames = self.frames
        cdef Frame frame
        cdef Py_ssize_t top = 1
        cdef int64_t uncovered
        frames[0] = Frame(0, root.end, 0)
        while top > 0:
            top -= 1
            frame = frames[top]
            node = &self.nodes[frame.node]
            node.on_path = True
            ranked = &self.walk[node.kids_at]
            while (
                frame.index < node.walkable and self.nodes[ranked[frame.index]].end > frame.cursor
            ):
                frame.index += 1  # overlaps the cursor or ends after it: not on the path
            if frame.index < node.walkable:
                child = ranked[frame.index]
                kid = &self.nodes[child]
                node.self_ns += frame.cursor - kid.end
                frames[top] = Frame(frame.node, kid.start, frame.index + 1)
                frames[top + 1] = Frame(child, kid.end, 0)
                top += 2
            else:
                node.self_ns += frame.cursor - node.start
        uncovered = (root.start - window_start) + (window_end - root.end)
        return uncovered if uncovered > 0 else 0

    cdef bint before(self, Py_ssize_t a, Py_ssize_t b) except -1:
        """Whether child `a` ranks before `b`: later clipped end, earlier start before
        clipping, lower id, placed first."""
        cdef Node* x = &self.nodes[a]
        cdef Node* y = &self.nodes[b]
        if x.end != y.end:
            return x.end > y.end
        if x.unclipped != y.unclipped:
            return x.unclipped < y.unclipped
        a_id, b_id = self.node_id(a), self.node_id(b)
        if PyObject_RichCompareBool(a_id, b_id, Py_EQ):
            return a < b
        return PyObject_RichCompareBool(a_id, b_id, Py_LT)

    cdef int rank(self, Py_ssize_t* items, Py_ssize_t count) except -1:
        """Sort `items` by `before`: insertion for a few, merging for many."""
        cdef Py_ssize_t i, j, item
        if count <= 16:
            for i in range(1, count):
                item = items[i]
                j = i
                while j > 0 and self.before(item, items[j - 1]):
                    items[j] = items[j - 1]
                    j -= 1
                items[j] = item
            return 0
        cdef Py_ssize_t half = count // 2
        self.rank(items, half)
        self.rank(items + half, count - half)
        cdef Py_ssize_t* merged = self.scratch
        i, j = 0, half
        cdef Py_ssize_t k = 0
        while i < half and j < count:
            if self.before(items[j], items[i]):
                merged[k] = items[j]
                j += 1
            else:
                merged[k] = items[i]
                i += 1
            k += 1
        while i < half:
            merged[k] = items[i]
            i += 1
            k += 1
        while j < count:
            merged[k] = items[j]
            j += 1
            k += 1
        for i in range(count):
            items[i] = merged[i]
        return 0


cdef inline int64_t _own_end(Node* node) noexcept:
    """`attribution._own_end`: the end extended to `reach` (rule 3b), cut at the node's
    own first-token mark (rule 2), never before its start."""
    cdef int64_t end = node.reach if node.reach > node.end else node.end
    if node.has_mark and node.mark < end:
        end = node.mark if node.mark > node.start else node.start
    return end


cdef bint _carries(tuple match, object span, bint is_root) except -1:
    for selector in match:
        if selector.matches_shape(span.name, span.kind, span.service, is_root) and (
            selector.matches_attributes(span.attributes)
        ):
            return True
    return False


cdef inline bint _has(object mapping, object key) except -1:
    if type(mapping) is dict:
        return PyDict_Contains(mapping, key)
    return PySequence_Contains(mapping, key)


cdef bint _is_llm_call(object span, object attributes) except -1:
    """`llm_calls.is_llm_call`."""
    value = _get(attributes, GEN_AI_OPERATION_NAME)
    if isinstance(value, str) and value in LLM_OPERATIONS:
        return True
    value = _get(attributes, OPENINFERENCE_KIND)
    if value is not None and value == "LLM":
        return _first_text(attributes, MODEL_KEYS) is not None
    value = _get(attributes, LLM_REQUEST_TYPE)
    if value is not None and (value == "chat" or value == "completion"):
        return True
    return _field(span, _NAME_AT, "name") == VLLM_REQUEST_SPAN


# Where a `Span` keeps the fields the walks read most (`_slots.pxi`): read from there for a
# `Span` itself, by name for anything else.
cdef object _SPAN_TYPE = Span
cdef Py_ssize_t _SPAN_ID_AT = _slot_offset(Span, "span_id")
cdef Py_ssize_t _PARENT_AT = _slot_offset(Span, "parent_span_id")
cdef Py_ssize_t _ATTRIBUTES_AT = _slot_offset(Span, "attributes")
cdef Py_ssize_t _NAME_AT = _slot_offset(Span, "name")
cdef Py_ssize_t _START_AT = _slot_offset(Span, "start_ns")
cdef Py_ssize_t _END_AT = _slot_offset(Span, "end_ns")
cdef Py_ssize_t _KIND_AT = _slot_offset(Span, "kind")
cdef Py_ssize_t _SERVICE_AT = _slot_offset(Span, "service")
cdef Py_ssize_t _EVENTS_AT = _slot_offset(Span, "events")
cdef Py_ssize_t _SCOPE_AT = _slot_offset(Span, "scope")


cdef inline object _field(object span, Py_ssize_t at, str name):
    if type(span) is _SPAN_TYPE:
        return _get_slot(span, at)
    return getattr(span, name)


cdef bint _is_call(object span, object attributes, frozenset keys, frozenset events) except -1:
    """`scan`'s test of a span: an LLM call, or a carrier of one of the budget's marks
    (`keys`, `events`: `llm_calls.marked_by`)."""
    if _is_llm_call(span, attributes):
        return True
    if keys:
        for key in keys:
            if _has(attributes, key):
                return True
    if events:
        for event in _field(span, _EVENTS_AT, "events"):
            if event.name in events:
                return True
    return False


cdef bint _tells(object call) except -1:
    """Whether an LLM call says if it streamed (`llm_calls.streamed` is not None), read
    only where one of the attributes it reads is there."""
    attributes = _field(call, _ATTRIBUTES_AT, "attributes")
    return (
        _has(attributes, STREAM_FLAGS[0])
        or _has(attributes, STREAM_FLAGS[1])
        or _has(attributes, INVOCATION_PARAMETERS)
    ) and streamed(call) is not None


def scan(spans, frozenset keys, frozenset events):
    """`llm_calls.scan`, compiled: the first pass of reading a trace's LLM calls."""
    cdef dict by_id = {}
    cdef dict children = {}
    cdef list calls = []
    cdef bint sends = False
    cdef Py_ssize_t orphans = 0
    cdef PyObject* kids
    for span in spans:
        span_id = _field(span, _SPAN_ID_AT, "span_id")
        PyDict_SetItem(by_id, span_id, span)
        parent = _field(span, _PARENT_AT, "parent_span_id")
        if parent is not None:
            kids = PyDict_GetItem(children, parent)
            if kids is NULL:
                PyDict_SetItem(children, parent, [span])
            else:
                (<list>kids).append(span)
        attributes = _field(span, _ATTRIBUTES_AT, "attributes")
        if _is_call(span, attributes, keys, events):
            calls.append(span)
        if not sends:
            sends = _has(attributes, ASGI_EVENT)
    cdef set call_ids = set()
    for call in calls:
        call_ids.add(call.span_id)
    cdef list outermost = []
    for call in calls:
        if not _has_ancestor_in(call, call_ids, by_id):
            outermost.append(call)
    cdef bint told = sends
    if not told:
        for call in calls:
            if _tells(call):
                told = True
                break
    for span in spans:
        parent = _field(span, _PARENT_AT, "parent_span_id")
        if parent is None or PyDict_GetItem(by_id, parent) is NULL:
            orphans += 1
    return by_id, children, calls, call_ids, outermost or calls, told, orphans


cdef bint _has_ancestor_in(object span, set ids, dict by_id) except -1:
    """`llm_calls._has_ancestor_in`: whether a span above `span` is in `ids` (a parent
    cycle is walked once round)."""
    cdef Py_ssize_t seen = 0, count = len(by_id)
    cdef PyObject* above
    parent = _field(span, _PARENT_AT, "parent_span_id")
    while parent is not None and seen < count:
        above = PyDict_GetItem(by_id, parent)
        if above is NULL:
            return False
        if parent in ids:
            return True
        parent = (<object>above).parent_span_id
        seen += 1
    return False


cdef object _call_of(object span_id, set ids, dict by_id):
    """`llm_calls._call_of`: the outermost LLM call at or above span `span_id`."""
    found = None
    cdef Py_ssize_t seen = 0, count = len(by_id)
    cdef PyObject* span
    while span_id is not None and seen <= count:
        span = PyDict_GetItem(by_id, span_id)
        if span is NULL:
            break
        if span_id in ids:
            found = <object>span
        span_id = (<object>span).parent_span_id
        seen += 1
    return found


def calls_below(call, set ids, dict children):
    """`llm_calls.calls_below`, compiled: the LLM calls (by span id, `ids`) under `call`,
    depth first in their order (each span once, as `llm_calls._below` walks), as a list."""
    cdef list found = []
    cdef set seen = {call.span_id}
    cdef list pending = []
    cdef PyObject* kids = PyDict_GetItem(children, call.span_id)
    cdef Py_ssize_t i
    if kids is NULL:
        return found
    for i in range(len(<list>kids) - 1, -1, -1):
        pending.append((<list>kids)[i])
    while pending:
        below = pending.pop()
        span_id = below.span_id
        if span_id in seen:
            continue
        seen.add(span_id)
        if span_id in ids:
            found.append(below)
        kids = PyDict_GetItem(children, span_id)
        if kids is not NULL:
            for i in range(len(<list>kids) - 1, -1, -1):
                pending.append((<list>kids)[i])
    return found


cdef tuple _LIBRARIES = LIBRARIES  # in the order recognition prefers them
cdef dict _LIBRARY_BIT = {library: 1 << i for i, library in enumerate(_LIBRARIES)}
cdef tuple _SCOPE_BITS = tuple(
    (prefixes, _LIBRARY_BIT[library]) for library, prefixes in SCOPE_PREFIXES
)
cdef tuple _KEY_BITS = tuple((key, _LIBRARY_BIT[library]) for key, library in ATTRIBUTE_KEYS)
cdef dict _BITS_OF_KEY = {}  # each key's libraries, for a span that has fewer keys than these
for _key, _bit in _KEY_BITS:
    _BITS_OF_KEY[_key] = _BITS_OF_KEY.get(_key, 0) | _bit
cdef tuple _EVENT_BITS = tuple(
    (names, _LIBRARY_BIT[library]) for library, names in EVENT_NAMES
)
cdef long _OPENLIT_BIT = _LIBRARY_BIT[Instrumentation.OPENLIT]
cdef object _SDK_KEY = OPENLIT_SDK[0]
cdef object _SDK_OPENLIT = OPENLIT_SDK[1]


def recognize(spans):
    """`budget.recognize.recognize`, compiled: the library that traced these spans (one
    trace's) as a bit a library while the spans are read, or None."""
    cdef long found = 0, bit
    cdef bint vllm_alone = True, requests = False, prefill = False
    cdef dict scopes = {}
    cdef PyObject* known
    cdef Py_ssize_t i
    for span in spans:
        scope = _field(span, _SCOPE_AT, "scope")
        if scope:
            known = PyDict_GetItem(scopes, scope)
            if known is NULL:
                bit = 0
                for prefixes, library_bit in _SCOPE_BITS:
                    if scope.startswith(prefixes):
                        bit = library_bit
                        break
                PyDict_SetItem(scopes, scope, bit)
            else:
                bit = <object>known
            found |= bit
        attributes = _field(span, _ATTRIBUTES_AT, "attributes")
        if len(attributes) < len(_KEY_BITS):  # its few keys looked up, not each of these
            for key in attributes:
                known = PyDict_GetItem(_BITS_OF_KEY, key)
                if known is not NULL:
                    found |= <long><object>known
        else:
            for key, library_bit in _KEY_BITS:
                if _has(attributes, key):
                    found |= <long>library_bit
        value = _get(attributes, _SDK_KEY)
        if value is not None and value == _SDK_OPENLIT:
            found |= _OPENLIT_BIT
        events = _field(span, _EVENTS_AT, "events")
        if events:
            for names, library_bit in _EVENT_BITS:
                for event in events:
                    if event.name in names:
                        found |= <long>library_bit
                        break
        name = _field(span, _NAME_AT, "name")
        if name == VLLM_REQUEST_SPAN:
            requests = True
            prefill = prefill or _has(attributes, GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL)
        elif name not in VLLM_PHASE_SPANS:
            vllm_alone = False
    if found:
        for i in range(len(_LIBRARIES)):
            if found & (1 << i):
                return _LIBRARIES[i]
    if vllm_alone and requests:
        return Instrumentation.VLLM if prefill else Instrumentation.VLLM_V0
    return None


def call_attributes(call, below):
    """`llm_calls.call_attributes`, compiled: the model and token counts of `call`, or of
    the LLM calls `below` it (depth first) for what it does not name itself."""
    cdef dict out = {}
    cdef Py_ssize_t wanted = 1 + len(COUNTS)
    for span in itertools.chain((call,), below):
        if len(out) == wanted:
            break
        attributes = _field(span, _ATTRIBUTES_AT, "attributes")
        if GEN_AI_REQUEST_MODEL not in out:
            value = _first_text(attributes, MODEL_KEYS)
            if value is not None:
                out[GEN_AI_REQUEST_MODEL] = value
        for key, names in COUNTS:
            if key not in out:
                value = _first_count(attributes, names)
                if value is not None:
                    out[key] = value
    return out


cdef object _first_text(object attributes, tuple keys):
    """`llm_calls._first_text`: the first of `keys` whose value is a non-empty string."""
    for key in keys:
        value = _get(attributes, key)
        if isinstance(value, str) and value:
            return value
    return None


cdef object _first_count(object attributes, tuple keys):
    """`llm_calls._first_count`: the first of `keys` whose value is a count (an int, not
    a bool, not negative)."""
    for key in keys:
        value = _get(attributes, key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None
