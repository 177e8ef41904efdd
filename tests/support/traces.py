"""Synthetic traces in the reference path's shapes (DESIGN §3), for tests and benches."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from spanbudget.collector.spans import AttrValue, Span, SpanKind, first_events

T0_NS = 1_760_000_000_000_000_000  # an arbitrary wall-clock origin
_MS = 1_000_000


@dataclass
class TraceBuilder:
    """Adds spans with times in milliseconds from `T0_NS`; ids are sequential hex."""

    trace_id: str = "5b8aa5a2d2c872e8321cf37308d69df2"
    spans: list[Span] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def add(
        self,
        name: str,
        start_ms: float,
        end_ms: float,
        *,
        parent: str | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        service: str = "rag-gateway",
        error: bool = False,
        attributes: dict[str, AttrValue] | None = None,
        host: str | None = None,
        events: dict[str, float] | None = None,
        scope: str | None = None,
    ) -> str:
        """The new span's id; `events` are span events by name, at their ms from T0."""
        span_id = f"{next(self._ids):016x}"
        self.spans.append(
            Span(
                trace_id=self.trace_id,
                span_id=span_id,
                name=name,
                start_ns=T0_NS + round(start_ms * _MS),
                end_ns=T0_NS + round(end_ms * _MS),
                parent_span_id=parent,
                kind=kind,
                service=service,
                attributes=attributes or {},
                error=error,
                host=host,
                events=first_events(
                    (name, T0_NS + round(ms * _MS)) for name, ms in (events or {}).items()
                ),
                scope=scope,
            )
        )
        return span_id


def rag_trace(
    *,
    network: float = 0,
    gateway: float = 0,
    retrieval: float = 0,
    prompt: float = 0,
    queue: float = 0,
    prefill: float = 0,
    client_root: bool = True,
    root_kind: SpanKind = SpanKind.CLIENT,
    root_service: str = "spanbudget-loadtest",
    marks: bool = True,
    vllm_skew_ms: float = 0,
    chat_error: bool = False,
    trace_id: str = "5b8aa5a2d2c872e8321cf37308d69df2",
) -> TraceBuilder:
    """The reference RAG request, stage by stage, with optional extra milliseconds per stage.

    The first token leaves the engine at 137 ms, reaches the gateway's LLM client at 138,
    is written by the gateway at 139 and reaches the caller at 140: each span is done at
    its own mark (DESIGN §5 rule 2). With no extras the critical path gives: network 6
    (5 in, 1 back), gateway 10 (1 of it the relay), retrieval 18, prompt 8, prefill 98
    (vLLM frontend 15, queue 10, prefill 70; chat 1, POST 2: the hops to the engine and
    back): TTFT 140. Each extra adds to its stage and to the TTFT one for one.
    `client_root=False` leaves out the load tester's span (a server-only trace);
    `root_kind`/`root_service` change it.
    """
    b = TraceBuilder(trace_id=trace_id)
    s = 5 + network  # gateway server span starts
    r0 = s + 5 + gateway  # retrieval starts
    p0 = r0 + 20 + retrieval  # prompt starts
    c0 = p0 + 10 + prompt  # chat client starts
    engine_first_token = c0 + 97 + queue + prefill
    first_token = engine_first_token + 3  # as the load-test client sees it

    def mark(seconds: float) -> dict[str, AttrValue]:
        return {"gen_ai.response.time_to_first_chunk": seconds} if marks else {}

    root = None
    if client_root:
        root = b.add(
            "chat qwen2.5-7b",
            0,
            first_token + 260,
            kind=root_kind,
            service=root_service,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "qwen2.5-7b",
                "loadtest.run_id": "run-1",
                "loadtest.request_index": 7,
                **mark(first_token / 1000),
            },
        )
    server = b.add(
        "POST /v1/chat/completions",
        s,
        first_token + 253,
        parent=root,
        kind=SpanKind.SERVER,
        attributes={"http.request.method": "POST", **mark((first_token - 1 - s) / 1000)},
    )
    b.add("gateway.validate", s + 1, s + 2, parent=server)
    b.add("auth.verify", s + 2, s + 4 + gateway, parent=server)
    retrieval_id = b.add(
        "retrieval rag-docs",
        r0,
        r0 + 18 + retrieval,
        parent=server,
        attributes={"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "rag-docs"},
    )
    b.add(
        "embeddings all-MiniLM-L6-v2",
        r0,
        r0 + 14,
        parent=retrieval_id,
        attributes={"gen_ai.operation.name": "embeddings"},
    )
    b.add(
        "query rag-docs",
        r0 + 14,
        r0 + 17 + retrieval,
        parent=retrieval_id,
        attributes={"db.system.name": "qdrant", "db.operation.name": "query"},
    )
    b.add("prompt.render", p0, p0 + 8 + prompt, parent=server)
    chat = b.add(
        "chat qwen2.5-7b",
        c0,
        first_token + 252,
        parent=server,
        kind=SpanKind.CLIENT,
        error=chat_error,
        attributes={"gen_ai.operation.name": "chat", **mark((first_token - 2 - c0) / 1000)},
    )
    post = b.add("POST", c0 + 1, first_token + 251, parent=chat, kind=SpanKind.CLIENT)
    vllm_attrs: dict[str, AttrValue] = {
        "gen_ai.latency.time_in_queue": (10 + queue) / 1000,
        "gen_ai.latency.time_in_model_prefill": (70 + prefill) / 1000,
        "gen_ai.usage.prompt_tokens": 512,
    }
    if marks:
        vllm_attrs["gen_ai.latency.time_to_first_token"] = (engine_first_token - c0 - 2) / 1000
    b.add(
        "llm_request",
        c0 + 2 + vllm_skew_ms,
        first_token + 250 + vllm_skew_ms,
        parent=post,
        kind=SpanKind.SERVER,
        service="vllm",
        attributes=vllm_attrs,
    )
    return b


def openlit_stream_without_http_child() -> TraceBuilder:
    """An app's streamed chat traced by OpenLIT with its HTTP instrumentors off: the chat
    span's `gen_ai.server.time_to_first_token` (40 ms) and no child to anchor it, so the
    first token counts from the span's start (5 ms into the root): an estimate, 45 ms."""
    trace = TraceBuilder()
    root = trace.add("handle question", 0, 200, service="app")
    trace.add(
        "chat m", 5, 190, parent=root, kind=SpanKind.CLIENT, service="app",
        attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.stream": True,
            "gen_ai.server.time_to_first_token": 0.04,
        },
    )  # fmt: skip
    return trace


def openinference_trace(trace_id: str, retrieval: float) -> TraceBuilder:
    """A chain traced by OpenInference (judged by its preset, `openinference-ttft`): its
    retriever for `retrieval` ms (the preset's limit: 150), then the LLM span whose `First
    Token Stream Event` comes 100 ms after it starts."""
    b = TraceBuilder(trace_id=trace_id)
    kind = "openinference.span.kind"
    root = b.add("rag chain", 0, retrieval + 400, service="rag-app", attributes={kind: "CHAIN"})
    b.add(
        "retrieve",
        5,
        5 + retrieval,
        parent=root,
        service="rag-app",
        attributes={kind: "RETRIEVER"},
    )
    b.add(
        "ChatOpenAI",
        10 + retrieval,
        retrieval + 390,
        parent=root,
        service="rag-app",
        attributes={kind: "LLM"},
        events={"First Token Stream Event": retrieval + 110},
    )
    return b
