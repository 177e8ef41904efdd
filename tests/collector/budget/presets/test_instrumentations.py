"""Streams judged where each instrumentation library marks the first token, and as close to
what the client saw as that mark can be (issue 44): the zoo's app under OpenLLMetry,
OpenInference, OpenLIT (with and without its HTTP child), OpenTelemetry's openai-v2 and
LangChain chains, against a server traced by opentelemetry-instrumentation-fastapi.

Every verdict here is `spanbudget check`'s with no preset: the library is recognised per
trace. Two claims per stream. The judged first token is the library's mark exactly (read
from the spans as `marks.py` says each library records it; deterministic). And that mark
against the client's own clock (`time.time_ns()` when the first chunk reached it; the
spans use the same clock): never after, and the median over a variant's streams within
1 ms for exact marks (an event; OpenLIT's attribute anchored on its HTTP child), within
5 ms for the server's first body send (one hop, and LangChain's parser, before the app
reads it). On a loaded machine a single stream now and then lands further off (the client
process is descheduled between the instrumentation's timestamp and its own: up to 15 ms
seen); so the tolerance holds the median, and the largest gap is in the failure message
and in docs/usage.md's table, not hidden in a wider bound. Where the machine is saturated
(load average above twice its CPUs) a miss skips with its numbers instead (`zoo.timed`):
not measured, never passed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import pytest
from spanbudget.collector.judging.verdict import Status, Verdict

from tests.collector.budget.presets.marks import (
    EXACT_MS,
    LIBRARIES,
    judged_instant,
    library_mark,
    vllm_mark,
)
from tests.collector.budget.presets.zoo import VARIANTS, ZooRun, timed

pytestmark = pytest.mark.slow

READ_MS = 0.01  # ttft_ms is rounded to 10 µs
ROLE_FIRST_GAP_MS = 100.0  # the zoo server's wait between the role-only chunk and content
# OpenLIT's estimate is early by the wait for the response headers: the held-back time and
# what it takes a request to get its headers otherwise (a few ms; 15 ms on a first request).
HEADERS_MARGIN_MS = 30.0
# LangChain chains with no root span: OpenInference's LangChain spans are never current,
# so the hook has no context to pass on and the server's spans form a trace of their own.
UNMARKED = {("lc-openinference", "chain_no_root")}
TIMED = (Status.OK, Status.WARN, Status.OVERRUN)  # judged on its first token (a busy machine
# makes the zoo slow: an overrun is the app's, not the mark's)


def marked_streams(run: ZooRun) -> list[tuple[dict[str, Any], Verdict]]:
    """Each streamed request whose trace holds its library's mark, with its verdict."""
    return [
        (request, run.verdicts[request["trace_id"]])
        for request in run.requests(stream=True)
        if (run.variant, request["shape"]) not in UNMARKED
    ]


def client_gap_ms(run: ZooRun, request: dict[str, Any], verdict: Verdict, key: str) -> float:
    """Judged first token minus the client's instant `key`, in ms."""
    assert verdict.ttft_ms is not None, verdict.to_dict()
    instant = judged_instant(run.trace(request["trace_id"]), verdict.ttft_ms)
    return (instant - request[key]) / 1e6


def test_each_stream_is_judged_at_its_librarys_mark(run: ZooRun) -> None:
    """To 10 µs, for every stream, whatever the machine's load: the judged first token is
    the one its library marked (not an embeddings call's, not the first of two calls', not
    moved by a clock-skew correction: the zoo runs on one clock), by the source the library
    calls for, exact or not."""
    library = LIBRARIES[run.variant]
    streams = marked_streams(run)
    assert len(streams) >= 5
    for request, verdict in streams:
        assert verdict.status in TIMED, (request["shape"], verdict.to_dict())
        assert verdict.instrumentation == library.instrumentation
        assert verdict.first_token is not None
        assert verdict.first_token["source"] == library.source
        assert verdict.first_token["exact"] is library.exact
        spans = run.trace(request["trace_id"])
        assert verdict.ttft_ms is not None
        gap_ms = (judged_instant(spans, verdict.ttft_ms) - library_mark(run.variant, spans)) / 1e6
        assert abs(gap_ms) <= READ_MS, (request["shape"], gap_ms, verdict.first_token)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if LIBRARIES[v].exact])
def test_the_judged_first_token_is_the_clients_first_chunk(
    zoo: Callable[[str], ZooRun], variant: str
) -> None:
    """Never after the client got it; the median within the mark's tolerance (OpenLIT's
    estimate: the next test)."""
    run = zoo(variant)
    library = LIBRARIES[variant]
    gaps = [client_gap_ms(run, r, v, "first_chunk_ns") for r, v in marked_streams(run)]
    worst = min(gaps)
    median = statistics.median(gaps)
    message = f"judged − client: median {median:.2f} ms, worst {worst:.2f} ms over {len(gaps)}"
    assert max(gaps) <= READ_MS, message
    timed(abs(median) <= library.tolerance_ms, message)


def test_openlit_without_its_http_child_is_early_by_the_headers(
    zoo: Callable[[str], ZooRun],
) -> None:
    """OpenLIT counts its time_to_first_token from when the response headers came. With its
    httpx and requests instrumentors off nothing in the spans says when that was, so the
    value counted from the chat span's start is an estimate, early by the wait for the
    headers: by each stream's own wait as the client measured it (the median within 1 ms;
    the worst in the message), at least by the time the server held them back, and, in the
    median, by no more than that plus a margin."""
    run = zoo("openlit-nohttp")
    streams = marked_streams(run)
    assert streams
    gaps: dict[int, list[float]] = {}
    residuals = []
    for request, verdict in streams:
        assert verdict.first_token is not None
        assert verdict.first_token["exact"] is False
        gap = client_gap_ms(run, request, verdict, "first_chunk_ns")
        assert gap <= -request["hold_ms"] + EXACT_MS, request["shape"]  # at least that early
        gaps.setdefault(request["hold_ms"], []).append(gap)
        residuals.append(gap + (request["returned_ns"] - request["sent_ns"]) / 1e6)
    worst = max(residuals, key=abs)
    median = statistics.median(residuals)
    timed(abs(median) <= EXACT_MS, f"error + the client's wait for headers: median {median:.2f}"
          f" ms, worst {worst:.2f} ms")  # fmt: skip
    for hold_ms, held in gaps.items():
        median = statistics.median(held)
        timed(median >= -(hold_ms + HEADERS_MARGIN_MS), f"held {hold_ms} ms: {median:.2f} ms")


def test_a_role_only_first_chunk_is_taken_for_the_first_token(run: ZooRun) -> None:
    """The limitation issue 44's item 9 documents: every library marks the first chunk,
    also one that carries only the role, and so does the server's first body send; the
    spans cannot tell. The first content comes 100 ms later: the judged first token is
    nearer the role-only chunk than the content, by the client's clock (whose reads of the
    two chunks a loaded machine delays by a few ms each, unequally: 94.5 ms apart was seen
    at load 3.1 on 2 CPUs)."""
    streams = [(r, v) for r, v in marked_streams(run) if r["shape"].endswith("role_first")]
    assert streams
    # An estimate is earlier still, by the wait for the headers.
    earliest = -ROLE_FIRST_GAP_MS - (25 if LIBRARIES[run.variant].exact else 1000)
    for request, verdict in streams:
        to_content = client_gap_ms(run, request, verdict, "first_content_ns")
        message = f"judged − the client's first content: {to_content:.2f} ms"
        timed(earliest <= to_content <= -ROLE_FIRST_GAP_MS / 2, message)


def test_vllms_span_in_the_trace_leaves_the_first_token_the_clients(
    zoo: Callable[[str], ZooRun],
) -> None:
    """The server streams from the engine emulator and passes the context on: vLLM's
    llm_request is in the app's trace, under the server, with its own first token earlier;
    the verdict's is still the client's (OpenLLMetry's event), and so are model and tokens."""
    run = zoo("openllmetry")
    (request,) = run.requests("vllm")
    spans = run.trace(request["trace_id"])
    (engine,) = [s for s in spans if s.name == "llm_request"]
    (server,) = [s for s in spans if s.span_id == engine.parent_span_id]
    assert server.service == "zoo-server"
    verdict = run.verdicts[request["trace_id"]]
    assert verdict.first_token is not None
    assert verdict.first_token["source"] == "event"
    assert verdict.ttft_ms is not None
    assert vllm_mark(engine) < judged_instant(spans, verdict.ttft_ms)
    assert verdict.attributes["gen_ai.usage.input_tokens"] == request["usage"]["input"]


def test_vllm_alone_is_judged_by_the_vllm_preset(zoo: Callable[[str], ZooRun]) -> None:
    """The server keeps the context from the engine: vLLM's span is a trace of its own,
    recognised as vLLM's and judged by engine phase."""
    run = zoo("openllmetry")
    app_traces = {r["trace_id"] for r in run.requests()}
    (engine,) = [s for s in run.spans if s.name == "llm_request" and s.trace_id not in app_traces]
    verdict = run.verdicts[engine.trace_id]
    assert verdict.instrumentation == "vllm"
    assert verdict.first_token is not None
    assert verdict.first_token["source"] == "vllm"
    assert verdict.ttft_ms == round((vllm_mark(engine) - engine.start_ns) / 1e6, 2)
    parts = [s.ms for s in verdict.stages if s.ms is not None]
    assert round(sum(parts) + verdict.unattributed_ms, 2) == verdict.ttft_ms
    assert verdict.stage("prefill").breakdown.keys() == {"vllm.prefill"}
