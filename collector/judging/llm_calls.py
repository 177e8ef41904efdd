"""What kind of request a trace was: its LLM calls, whether they streamed, and which one's
first token ended the window; and the verdict settled on that (DESIGN §5 rules 0 and 7,
as the project's notes extend them).

A trace judged against a TTFT budget is about a streamed LLM call. One with no LLM call
in it (a model list, a health check) is `not_applicable`; one whose calls were not
streamed is `not_streamed`, its response time beside (or, with the budget's
`non_streamed: judge`, judged with the whole response as its first token). Neither
counts in the SLO. The verdict's model and token counts come from the LLM call whose
first token ended the window, not from whichever span names a model first (an
embeddings call before the chat, in a RAG app).

The names each instrumentation writes (tests/collector/budget/presets/ runs them):
an LLM call is a span with `gen_ai.operation.name` chat, text_completion or
generate_content (the GenAI conventions: OpenTelemetry's instrumentations, OpenLLMetry,
OpenLIT, the reference path), OpenInference's `openinference.span.kind` LLM with a model
(its `models.list()` span is an LLM span without one), OpenLLMetry's older
`llm.request.type`, or vLLM's `llm_request`. Streamed: `gen_ai.request.stream`,
`gen_ai.is_streaming`, or `stream` in OpenInference's `llm.invocation_parameters`; where
a call says nothing (OpenTelemetry's openai-v2), the server's spans tell, when they are
in the trace: a streamed response is sent in many body messages, a whole one in one.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import NamedTuple

from spanbudget.common.semconv import (
    GEN_AI_OPERATION_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_REQUEST_STREAM,
    GEN_AI_USAGE_COMPLETION_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    GEN_AI_USAGE_PROMPT_TOKENS,
    VLLM_REQUEST_SPAN,
)

from ..budget.model import Budget, FirstTokenMark, NonStreamed
from ..spans import AttrValue, Span, SpanKind
from .verdict import Status, Verdict
from .verdict_rules import round_ms

__all__ = [
    "LlmRequest",
    "Reading",
    "Scan",
    "call_attributes",
    "calls_below",
    "is_llm_call",
    "read_request",
    "reading",
    "request_of",
    "scan",
    "settle",
    "streamed",
]

LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
MODEL_KEYS = (GEN_AI_REQUEST_MODEL, "gen_ai.response.model", "llm.model_name")
_INPUT_TOKENS = (GEN_AI_USAGE_INPUT_TOKENS, "llm.token_count.prompt", GEN_AI_USAGE_PROMPT_TOKENS)
_OUTPUT_TOKENS = (
    GEN_AI_USAGE_OUTPUT_TOKENS,
    "llm.token_count.completion",
    GEN_AI_USAGE_COMPLETION_TOKENS,
)
# The token counts a verdict carries, each by the names instrumentations give it.
COUNTS = (
    (GEN_AI_USAGE_INPUT_TOKENS, _INPUT_TOKENS),
    (GEN_AI_USAGE_OUTPUT_TOKENS, _OUTPUT_TOKENS),
)
STREAM_FLAGS = (GEN_AI_REQUEST_STREAM, "gen_ai.is_streaming")
INVOCATION_PARAMETERS = "llm.invocation_parameters"
OPENINFERENCE_KIND = "openinference.span.kind"
LLM_REQUEST_TYPE = "llm.request.type"  # OpenLLMetry's older name of the operation
# opentelemetry-instrumentation-asgi's spans of each message a server sends.
ASGI_EVENT = "asgi.event.type"
_BODY_SENT = "http.response.body"


def is_llm_call(span: Span) -> bool:
    """Whether `span` is a call to a language model (not an embeddings call, not a
    retrieval, not a model list)."""
    attributes = span.attributes
    operation = attributes.get(GEN_AI_OPERATION_NAME)
    if isinstance(operation, str) and operation in LLM_OPERATIONS:
        return True
    if attributes.get(OPENINFERENCE_KIND) == "LLM":
        return _first_text(attributes, MODEL_KEYS) is not None
    if attributes.get(LLM_REQUEST_TYPE) in ("chat", "completion"):
        return True
    return span.name == VLLM_REQUEST_SPAN


def streamed(span: Span) -> bool | None:
    """What the call's own attributes say of streaming: True, False, or None (silent)."""
    attributes = span.attributes
    for key in STREAM_FLAGS:
        flag = _flag(attributes.get(key))
        if flag is not None:
            return flag
    parameters = attributes.get(INVOCATION_PARAMETERS)
    if isinstance(parameters, str):
        try:
            decoded = json.loads(parameters)
        except ValueError:
            return None
        if isinstance(decoded, dict):
            # OpenInference leaves `stream` out of a call that was not streamed.
            return _flag(decoded.get("stream")) or False
    return None


@dataclass(frozen=True, slots=True)
class LlmRequest:
    """What a trace's spans say of its LLM calls. `streamed`: True when any call streamed,
    False when every call is known not to have, None when they do not say; `response_end`
    the span id and end of the outermost call that ended last (the whole response);
    `attributes` the model and token counts of the call the first token came from;
    `missing_parents` the spans whose parent is not in the trace, besides its root."""

    calls: int
    streamed: bool | None
    response_end: tuple[str, int] | None
    attributes: Mapping[str, str | int]
    missing_parents: int = 0


# What `scan` finds in one pass over a trace's spans: each span by id (the last of an id),
# the spans under each parent id in their order, the LLM calls (and the spans that carry a
# first-token mark), their span ids, the outermost of them (no call above them; all of
# them in a cycle of calls), whether anything tells of streaming (a server's sends shown,
# or a call that says), and how many spans have no parent in the trace (its root among
# them).
Scan = tuple[dict[str, Span], dict[str, list[Span]], list[Span], set[str], list[Span], bool, int]


class Reading(NamedTuple):
    """What `read_request` runs on every trace the collector judges, in Python (this
    module's `scan`, `calls_below` and `call_attributes`) or compiled (`_judge`'s, the
    same: tests hold the two equal); `scan` with the budget's first-token marks bound
    (`reading`)."""

    scan: Callable[[Sequence[Span]], Scan]
    calls_below: Callable[[Span, set[str], Mapping[str, list[Span]]], Iterable[Span]]
    call_attributes: Callable[[Span, Iterable[Span]], dict[str, str | int]]


def marked_by(marks: Sequence[FirstTokenMark]) -> tuple[frozenset[str], frozenset[str]]:
    """The attribute names and the event names of a budget's `marks`: a span carrying one
    of them counts as an LLM call (`scan`)."""
    keys = frozenset(mark.attribute for mark in marks if mark.attribute is not None)
    events = frozenset(name for mark in marks for name in mark.events)
    return keys, events


def reading(marks: Sequence[FirstTokenMark], compiled: ModuleType | None = None) -> Reading:
    """The walks for a budget's `marks`: this module's, or those of `compiled` (`_judge`)."""
    keys, events = marked_by(marks)
    if compiled is None:
        return Reading(lambda spans: scan(spans, keys, events), calls_below, call_attributes)
    run = compiled.scan
    return Reading(
        lambda spans: run(spans, keys, events), compiled.calls_below, compiled.call_attributes
    )


def scan(spans: Sequence[Span], keys: frozenset[str], events: frozenset[str]) -> Scan:
    """The one pass `read_request` starts with, which runs on every trace the collector
    judges (`_judge.scan` is the same, compiled: tests hold the two equal). `keys` and
    `events` are the budget's first-token marks' attribute names and event names."""
    by_id: dict[str, Span] = {}
    children: dict[str, list[Span]] = {}
    calls: list[Span] = []
    sends = False  # whether a server's spans show what it sent
    for span in spans:
        by_id[span.span_id] = span
        if span.parent_span_id is not None:
            children.setdefault(span.parent_span_id, []).append(span)
        if is_llm_call(span) or _marked(span, keys, events):
            calls.append(span)
        sends = sends or ASGI_EVENT in span.attributes
    call_ids = {call.span_id for call in calls}
    outermost = [c for c in calls if not _has_ancestor_in(c, call_ids, by_id)] or calls
    told = sends or any(streamed(call) is not None for call in calls)
    orphans = sum(1 for span in spans if span.parent_span_id not in by_id)
    return by_id, children, calls, call_ids, outermost, told, orphans


def read_request(
    spans: Sequence[Span],
    first_token_span: str | None,
    marks: Sequence[FirstTokenMark] = (),
    *,
    walks: Reading | None = None,
) -> LlmRequest:
    """The LLM calls of one trace's spans, and which one the first token (carried by span
    `first_token_span`, if any) came from. A span that carries the attribute or the event
    of one of the budget's `marks` counts as a call too, whatever its names (an app's own
    instrumentation, which the budget was written for). `walks` is `reading(marks)`, made
    once by an evaluator (compiled where it judges on the compiled path)."""
    walks = walks or reading(marks)
    return request_of(spans, first_token_span, marks, walks.scan(spans), walks)


def request_of(
    spans: Sequence[Span],
    first_token_span: str | None,
    marks: Sequence[FirstTokenMark],
    scanned: Scan,
    walks: Reading,
) -> LlmRequest:
    """`read_request` past its first pass (`scanned`: what `walks.scan` found in `spans`).
    The compiled evaluator reads most traces itself (`_judge.CompiledJudge.judge_reading`
    over its judge's own index of the spans, else `CompiledJudge.read`) and hands this the
    rest: where a call or a server tells whether the calls streamed."""
    by_id, children, calls, call_ids, outermost, told, orphans = scanned
    missing = max(0, orphans - 1)  # the root's own parent is not in the trace either
    if not calls:
        return LlmRequest(0, None, None, {}, missing)
    # What the caller saw decides: the outermost calls (an engine's span under an app's
    # call says nothing of whether the app streamed), each by its own word, else by the
    # first call below it that says. Where nothing tells (no call says, no server shows
    # its sends: the reference path), none can: the walks are left out.
    if told:
        flags = [_streaming_of(call, call_ids, children) for call in outermost]
    else:
        flags = [None] * len(outermost)
    stream = True if True in flags else (False if None not in flags else None)
    carrier = by_id.get(first_token_span) if first_token_span is not None else None
    if stream is None and carrier is not None and carrier.kind is SpanKind.SERVER:
        # The calls do not say, and the server whose first send was the first token is
        # not under them (a LangChain chain's context): its sends tell.
        stream = _sends_tell(carrier, children)
    elif stream is None and carrier is None:
        # Nor is there a first token: the servers that could have carried the server's
        # mark (a route that streams answers) tell, each having sent its body whole.
        stream = _servers_tell(spans, marks, by_id, children)
    last = max(outermost, key=lambda c: (c.end_ns, c.span_id))
    chosen = _call_of(first_token_span, call_ids, by_id) or _chosen(outermost, flags)
    return LlmRequest(
        len(calls),
        stream,
        (last.span_id, last.end_ns),
        walks.call_attributes(chosen, walks.calls_below(chosen, call_ids, children)),
        missing,
    )


def settle(
    verdict: Verdict,
    request: LlmRequest,
    budget: Budget,
    *,
    first_token: Mapping[str, str | bool] | None,
    window_start_ns: int,
    instrumentation: str | None = None,
    evolve: Callable[..., Verdict] = replace,
) -> Verdict:
    """The verdict as the request makes it: `not_applicable` without an LLM call and a
    first token other than a server's first body send, `not_streamed` when no call
    streamed (unless the budget judges those), `incomplete` blaming nothing; the LLM
    call's model and tokens in its attributes; the spans whose parent is not in the trace,
    besides its root, as `damaged` (`missing_parent`, DESIGN §5 rule 1: judged all the
    same); `instrumentation`, the library whose preset judged it (None: the budget's
    own). `evolve` is `dataclasses.replace`, or the compiled evaluator's own."""
    attributes = {**verdict.attributes, **request.attributes}
    damaged = verdict.damaged
    if request.missing_parents:
        damaged = {**(damaged or {}), "missing_parent": request.missing_parents}
    settled = evolve(
        verdict,
        attributes=attributes,
        damaged=damaged,
        first_token=first_token,
        instrumentation=instrumentation,
    )
    # No LLM call, and no first token but a server's first body send (the server's own
    # trace, where the app passed no context on: the app's trace holds the call).
    served = first_token is not None and first_token.get("source") == "first child"
    if request.calls == 0 and (verdict.ttft_ms is None or served):
        return _blaming_nothing(
            replace(settled, ttft_ms=None, first_token=None), Status.NOT_APPLICABLE
        )
    skip = budget.non_streamed is NonStreamed.SKIP
    if request.streamed is False and skip and verdict.status is not Status.ERROR:
        whole = request.response_end
        response_ms = None if whole is None else round_ms(whole[1] - window_start_ns)
        settled = replace(settled, ttft_ms=None, first_token=None, response_ms=response_ms)
        return _blaming_nothing(settled, Status.NOT_STREAMED)
    if verdict.status is Status.INCOMPLETE:
        return _blaming_nothing(settled, Status.INCOMPLETE)
    return settled


def _blaming_nothing(verdict: Verdict, status: Status) -> Verdict:
    """A verdict without a window to judge: measured to the root's end, so no stage is
    above ok, nothing is blamed and nothing overran (the stage times stay, as what the
    spans took)."""
    stages = tuple(
        replace(stage, status=Status.OK) if stage.status.severity > 0 else stage
        for stage in verdict.stages
    )
    return replace(
        verdict,
        status=status,
        total_status=status,
        stages=stages,
        blame=(),
        overrun_ms=0.0,
    )


def _marked(span: Span, keys: frozenset[str], events: frozenset[str]) -> bool:
    if keys and not keys.isdisjoint(span.attributes):
        return True
    return bool(events and span.events) and any(event.name in events for event in span.events)


def _flag(value: AttrValue | None) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _streamed_or_told(call: Span, children: Mapping[str, list[Span]]) -> bool | None:
    """`streamed`, else what the server under the call says: a SERVER span below it that
    sent its response body in more than one message streamed it."""
    said = streamed(call)
    if said is not None:
        return said
    for span in _below(call, children):
        if span.kind is SpanKind.SERVER:
            told = _sends_tell(span, children)
            if told is not None:
                return told
    return None


def _sends_tell(server: Span, children: Mapping[str, list[Span]]) -> bool | None:
    """A server span that sent its response body in more than one message streamed it;
    None when it shows no sends."""
    kids = children.get(server.span_id, ())
    sends = sum(1 for kid in kids if kid.attributes.get(ASGI_EVENT) == _BODY_SENT)
    return sends > 1 if sends else None


def _servers_tell(
    spans: Sequence[Span],
    marks: Sequence[FirstTokenMark],
    by_id: Mapping[str, Span],
    children: Mapping[str, list[Span]],
) -> bool | None:
    """False when every span that could carry one of `marks`' first body sends (the
    `match` of a `first_child` mark: a route that streams answers) sent its response body
    in one message, and at least one did; None otherwise (a server that sent several would
    have carried the mark)."""
    told: list[bool] = []
    for mark in marks:
        if mark.first_child is None:
            continue
        for span in spans:
            is_root = span.parent_span_id not in by_id
            if mark.match and not any(
                sel.matches_shape(span.name, span.kind, span.service, is_root)
                and sel.matches_attributes(span.attributes)
                for sel in mark.match
            ):
                continue
            tell = _sends_tell(span, children)
            if tell is not None:
                told.append(tell)
    return False if told and not any(told) else None


def _below(span: Span, children: Mapping[str, list[Span]]) -> Iterator[Span]:
    """The spans under `span`, depth first in their order, each once (a trace whose spans
    name each other as parents is walked once round); lazily, as its callers mostly stop
    at the first that says what they look for."""
    seen = {span.span_id}
    pending = list(reversed(children.get(span.span_id, ())))
    while pending:
        below = pending.pop()
        if below.span_id in seen:
            continue
        seen.add(below.span_id)
        yield below
        pending.extend(reversed(children.get(below.span_id, ())))


def _has_ancestor_in(span: Span, ids: set[str], by_id: Mapping[str, Span]) -> bool:
    parent = span.parent_span_id
    seen = 0
    while parent is not None and parent in by_id and seen < len(by_id):
        if parent in ids:
            return True
        parent = by_id[parent].parent_span_id
        seen += 1
    return False


def _call_of(span_id: str | None, ids: set[str], by_id: Mapping[str, Span]) -> Span | None:
    """The outermost LLM call at or above span `span_id`: the call the caller made, which
    the first token came out of (a server span's first body send, an engine's own mark)."""
    found = None
    seen = 0
    while span_id is not None and span_id in by_id and seen <= len(by_id):
        if span_id in ids:
            found = by_id[span_id]
        span_id = by_id[span_id].parent_span_id
        seen += 1
    return found


def _streaming_of(call: Span, ids: set[str], children: Mapping[str, list[Span]]) -> bool | None:
    """Whether an outermost call streamed: its own word (or its server's), else that of
    the first LLM call below it that says."""
    said = _streamed_or_told(call, children)
    if said is not None:
        return said
    for span in _below(call, children):
        if span.span_id in ids:
            said = _streamed_or_told(span, children)
            if said is not None:
                return said
    return None


def _chosen(outermost: list[Span], flags: list[bool | None]) -> Span:
    """Without a first token: a streamed call if one is, else the latest to end."""
    for call, flag in zip(outermost, flags, strict=True):
        if flag:
            return call
    return max(outermost, key=lambda c: (c.end_ns, c.span_id))


def calls_below(call: Span, ids: set[str], children: Mapping[str, list[Span]]) -> Iterator[Span]:
    """The LLM calls (by span id, `ids`) under `call`, depth first in their order; lazily."""
    return (span for span in _below(call, children) if span.span_id in ids)


def call_attributes(call: Span, below: Iterable[Span]) -> dict[str, str | int]:
    """The model and token counts of `call`, or of the LLM calls `below` it (depth first)
    for what it does not name itself (a caller's span names the model, the engine's the
    tokens)."""
    out: dict[str, str | int] = {}
    for span in itertools.chain((call,), below):
        if len(out) == 1 + len(COUNTS):  # all found: what is below cannot change them
            break
        attributes = span.attributes
        if GEN_AI_REQUEST_MODEL not in out:
            model = _first_text(attributes, MODEL_KEYS)
            if model is not None:
                out[GEN_AI_REQUEST_MODEL] = model
        for key, names in COUNTS:
            if key not in out:
                count = _first_count(attributes, names)
                if count is not None:
                    out[key] = count
    return out


def _first_text(attributes: Mapping[str, AttrValue], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _first_count(attributes: Mapping[str, AttrValue], keys: Sequence[str]) -> int | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None
