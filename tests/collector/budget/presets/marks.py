"""What each of the zoo's libraries is expected to be recognised as, and where it marks a
stream's first token: read straight from the spans, as the research for issue 44 found
each one records it, independently of the presets that the tests hold to it.

- OpenLLMetry: a `gen_ai.content.completion.chunk` event per chunk on the streamed
  `openai.chat` span; the first is the first token.
- OpenInference: one `First Token Stream Event` on the LLM span.
- OpenLIT: `gen_ai.server.time_to_first_token`, seconds from when the response headers
  came, which is where its HTTP child (`POST`, httpx's span) ends. With its HTTP
  instrumentors off there is no such child, and counted from the chat span's start the
  value is early by the wait for the headers: an estimate.
- OpenTelemetry's openai-v2 and LangChain under either library: no mark of their own; the
  server's first response-body send (`http send` with `asgi.event.type` =
  `http.response.body`) under the SERVER span that streamed (more than one body message).
- vLLM alone: its `llm_request` span's start plus `gen_ai.latency.time_to_first_token`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spanbudget.collector.spans import Span, SpanKind

__all__ = [
    "EXACT_MS",
    "LIBRARIES",
    "SERVER_SEND_MS",
    "Library",
    "body_sends",
    "judged_instant",
    "library_mark",
    "llm_call",
    "root_of",
    "vllm_mark",
]

EXACT_MS = 1.0  # an event, or an attribute anchored on the HTTP child: the client's instant
SERVER_SEND_MS = 5.0  # the server's first body send: one hop before the client reads it
OPENLIT_TTFT = "gen_ai.server.time_to_first_token"
VLLM_TTFT = "gen_ai.latency.time_to_first_token"
EVENTS = frozenset({"gen_ai.content.completion.chunk", "First Token Stream Event"})
CHAT_ROUTE = "POST /v1/chat/completions"
# The span of the app's call to the model, by variant.
LLM_SPANS = {
    "openllmetry": "openai.chat",
    "openinference": "ChatCompletion",
    "openlit": "chat zoo-model",
    "openlit-nohttp": "chat zoo-model",
    "openai-v2": "chat zoo-model",
    "lc-openinference": "ChatOpenAI",
    "lc-openllmetry": "ChatOpenAI.chat",
}


@dataclass(frozen=True)
class Library:
    """A zoo variant: the instrumentation its traces must be recognised as, the
    `first_token.source` of its streams, whether that is exact, how close to the client
    its median must be, and what becomes of `models.list()` (a verdict status, or None
    where the library makes no span of it)."""

    instrumentation: str
    source: str
    exact: bool
    tolerance_ms: float
    models_list: str | None = None


LIBRARIES = {
    "openllmetry": Library("openllmetry", "event", True, EXACT_MS),
    "openinference": Library("openinference", "event", True, EXACT_MS, "not_applicable"),
    "openlit": Library("openlit", "anchored attribute", True, EXACT_MS, "not_applicable"),
    # An estimate: the error is the wait for the response headers (test_instrumentations).
    "openlit-nohttp": Library("openlit", "attribute", False, EXACT_MS),
    "openai-v2": Library("genai", "first child", True, SERVER_SEND_MS),
    "lc-openinference": Library("openinference", "first child", True, SERVER_SEND_MS),
    "lc-openllmetry": Library("openllmetry", "first child", True, SERVER_SEND_MS),
}


def root_of(spans: Sequence[Span]) -> Span:
    """The trace's root: the span whose parent is not in it (the earliest, if several)."""
    ids = {span.span_id for span in spans}
    return min((s for s in spans if s.parent_span_id not in ids), key=lambda s: s.start_ns)


def judged_instant(spans: Sequence[Span], ttft_ms: float) -> float:
    """The first token a verdict found, in ns since the epoch: its window starts at the root."""
    return root_of(spans).start_ns + ttft_ms * 1e6


def body_sends(server: Span, spans: Sequence[Span]) -> list[Span]:
    """The response-body messages a SERVER span sent, in order."""
    sends = [
        s
        for s in spans
        if s.parent_span_id == server.span_id
        and s.attributes.get("asgi.event.type") == "http.response.body"
    ]
    return sorted(sends, key=lambda s: s.start_ns)


def library_mark(variant: str, spans: Sequence[Span]) -> int:
    """Where `variant`'s library marks the first token of the one stream in these spans."""
    source = LIBRARIES[variant].source
    if source == "event":
        (llm,) = [s for s in spans if any(e.name in EVENTS for e in s.events)]
        return min(e.time_ns for e in llm.events if e.name in EVENTS)
    if source == "first child":
        (server,) = [
            s
            for s in spans
            if s.kind is SpanKind.SERVER
            and s.name == CHAT_ROUTE
            and len(body_sends(s, spans)) > 1  # a whole response goes in one
        ]
        return body_sends(server, spans)[0].start_ns
    (chat,) = [s for s in spans if s.attributes.get("gen_ai.request.stream") is True]
    seconds = chat.attributes[OPENLIT_TTFT]
    assert isinstance(seconds, float)
    if source == "attribute":  # the estimate: from the chat span's start
        return chat.start_ns + round(seconds * 1e9)
    (post,) = [s for s in spans if s.parent_span_id == chat.span_id and s.name == "POST"]
    assert post.kind is SpanKind.CLIENT
    return post.end_ns + round(seconds * 1e9)


def llm_call(variant: str, spans: Sequence[Span]) -> Span:
    """The one call to the model in these spans (a request with one call)."""
    (call,) = [s for s in spans if s.name == LLM_SPANS[variant]]
    return call


def vllm_mark(engine: Span) -> int:
    """vLLM's own first token on its `llm_request` span."""
    seconds = engine.attributes[VLLM_TTFT]
    assert isinstance(seconds, float)
    return engine.start_ns + round(seconds * 1e9)
