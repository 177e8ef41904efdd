"""Which instrumentation library traced a trace, from what its spans carry.

Each library leaves its own marks: the instrumentation scope it names its spans with, an
attribute namespace, the events it adds. A trace is recognised by the first library in
`LIBRARIES` that one of its spans shows; vLLM's own `llm_request` alone (vLLM traced by
itself) is recognised last. The name is the preset that judges such traces
(`presets/NAME.yaml`). Nothing recognised: the trace is judged by the budget in effect
(the reference path's, or the user's own).

What each library was seen to emit (tests/collector/budget/presets/ runs each of them):

- OpenInference (Arize's `openinference-instrumentation-*`): `openinference.span.kind` on
  every span; scopes `openinference.instrumentation.*`.
- OpenLLMetry (Traceloop's `opentelemetry-instrumentation-*`, 0.62): scopes
  `opentelemetry.instrumentation.openai.v1` (and `.v0`), `...langchain`, ...; a
  `gen_ai.content.completion.chunk` event per streamed chunk; `gen_ai.is_streaming`;
  `traceloop.*` attributes (workflows, tasks, LangChain).
- OpenLIT: scopes `openlit.*`; `gen_ai.server.time_to_first_token`; its spans repeat
  `telemetry.sdk.name = "openlit"`.
- The OpenTelemetry GenAI instrumentation (`opentelemetry-instrumentation-openai-v2` with
  `opentelemetry-util-genai`): scopes `opentelemetry.util.genai.*` and
  `opentelemetry.instrumentation.openai_v2` (and the contrib's other GenAI ones).
- vLLM traced alone (its `llm_request` and per-phase spans, nothing else in the trace);
  `vllm-v0` when it reports no model-prefill time (V0).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from spanbudget.common.semconv import (
    GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
    VLLM_PHASE_SPANS,
    VLLM_REQUEST_SPAN,
)

from ..spans import Span

__all__ = [
    "ATTRIBUTE_KEYS",
    "EVENT_NAMES",
    "LIBRARIES",
    "OPENLIT_SDK",
    "SCOPE_PREFIXES",
    "Instrumentation",
    "recognize",
]


class Instrumentation(enum.Enum):
    """A recognised instrumentation; the value names the preset that judges it."""

    OPENINFERENCE = "openinference"
    OPENLLMETRY = "openllmetry"
    OPENLIT = "openlit"
    GENAI = "genai"
    VLLM = "vllm"
    VLLM_V0 = "vllm-v0"

    @property
    def preset(self) -> str:
        return self.value


# Scope-name prefixes, attribute names and prefixes, and event names per library, in the
# order they are tried (OpenInference's kind is on every span it makes; OpenLLMetry's and
# OpenLIT's names are their own; GenAI's scopes last, as OpenLIT and OpenLLMetry write GenAI
# attributes too).
SCOPE_PREFIXES: tuple[tuple[Instrumentation, tuple[str, ...]], ...] = (
    (Instrumentation.OPENINFERENCE, ("openinference.instrumentation",)),
    (
        Instrumentation.OPENLLMETRY,
        (
            "opentelemetry.instrumentation.openai.v",
            "opentelemetry.instrumentation.langchain",
            "opentelemetry.instrumentation.anthropic",
            "opentelemetry.instrumentation.llamaindex",
            "opentelemetry.instrumentation.qdrant",
            "opentelemetry.instrumentation.chromadb",
            "traceloop",
        ),
    ),
    (Instrumentation.OPENLIT, ("openlit",)),
    (
        Instrumentation.GENAI,
        (
            "opentelemetry.util.genai",
            "opentelemetry.instrumentation.openai_v2",
            "opentelemetry.instrumentation.google_genai",
            "opentelemetry.instrumentation.vertexai",
        ),
    ),
)
_ATTRIBUTES: tuple[tuple[Instrumentation, tuple[str, ...]], ...] = (
    (Instrumentation.OPENINFERENCE, ("openinference.span.kind",)),
    (
        Instrumentation.OPENLLMETRY,
        ("gen_ai.is_streaming", "traceloop.span.kind", "traceloop.entity.name", "llm.request.type"),
    ),
    (Instrumentation.OPENLIT, ("gen_ai.server.time_to_first_token",)),
)
EVENT_NAMES: tuple[tuple[Instrumentation, frozenset[str]], ...] = (
    (Instrumentation.OPENINFERENCE, frozenset({"First Token Stream Event"})),
    (
        Instrumentation.OPENLLMETRY,
        frozenset({"gen_ai.content.completion.chunk", "llm.content.completion.chunk"}),
    ),
)
OPENLIT_SDK = ("telemetry.sdk.name", "openlit")
# The attribute names flat, each with its library: one dict look-up a name and a span.
ATTRIBUTE_KEYS = tuple((key, library) for library, keys in _ATTRIBUTES for key in keys)

LIBRARIES = tuple(
    library
    for library in Instrumentation
    if library not in (Instrumentation.VLLM, Instrumentation.VLLM_V0)
)


def recognize(spans: Sequence[Span]) -> Instrumentation | None:
    """The library that traced these spans (one trace's), or None: none that spanbudget
    knows, so the budget in effect judges it. (`judging/_judge.pyx` has the same, compiled,
    for the collector's hot path: tests hold the two equal.)"""
    found: set[Instrumentation] = set()
    vllm_alone = True
    requests = prefill = False
    scopes: dict[str, Instrumentation | None] = {}  # a trace's spans share a few scopes
    for span in spans:
        scope = span.scope
        if scope:
            if scope not in scopes:
                scopes[scope] = _library_of_scope(scope)
            library = scopes[scope]
            if library is not None:
                found.add(library)
        attributes = span.attributes
        for key, library in ATTRIBUTE_KEYS:
            if key in attributes:
                found.add(library)
        if attributes.get(OPENLIT_SDK[0]) == OPENLIT_SDK[1]:
            found.add(Instrumentation.OPENLIT)
        if span.events:
            names = {event.name for event in span.events}
            for library, events in EVENT_NAMES:
                if names & events:
                    found.add(library)
        if span.name == VLLM_REQUEST_SPAN:
            requests = True
            prefill = prefill or GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL in attributes
        elif span.name not in VLLM_PHASE_SPANS:
            vllm_alone = False
    for library in LIBRARIES:
        if library in found:
            return library
    if vllm_alone and requests:
        return Instrumentation.VLLM if prefill else Instrumentation.VLLM_V0
    return None


def _library_of_scope(scope: str) -> Instrumentation | None:
    for library, prefixes in SCOPE_PREFIXES:
        if scope.startswith(prefixes):
            return library
    return None
