"""A RAG app as people write one: a LangChain chain (an in-memory vector store's retriever,
a prompt, a streamed ChatOpenAI, a string parser) under OpenInference's and OpenLLMetry's
LangChain instrumentations, with an httpx hook passing the trace context to the server.

Neither library marks the first token of a LangChain stream; the server's first body send
does, where its spans join the chain's trace. The retriever's spans are the retrieval
stage. Under OpenInference a chain with no root span of the app's own has no mark in its
trace (its LangChain spans are never the current span, so the hook has no context to pass
on): `incomplete`, blaming nothing, and `check` says why in one line.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from spanbudget.collector.judging.verdict import Status
from spanbudget.collector.spans import Span, SpanKind

from tests.collector.budget.presets.zoo import ZooRun

pytestmark = pytest.mark.slow

RETRIEVERS = {
    "lc-openinference": "VectorStoreRetriever",
    "lc-openllmetry": "vector_db_retrieve VectorStoreRetriever",
}


def _branch_finished_last(spans: list[Span], retriever: str) -> bool:
    """Whether the retriever's branch of the chain's RunnableParallel ended last of the
    branches run side by side, and the retriever last in its branch: only then is it on
    the critical path (DESIGN §5 rule 5, Jaeger's walk back from the end takes the child
    that finished last). Ends as the evaluator compares them: a CLIENT span's extended to
    its SERVER child's (rule 3b), so that an embeddings server ending its span a fraction
    of a millisecond after the retriever returned, while the chain's next step had
    started, takes the retriever off the path (the step that started is then walked)."""
    by_id = {span.span_id: span for span in spans}
    branch = next(span for span in spans if span.name == retriever)
    while branch.parent_span_id in by_id:
        parent = by_id[branch.parent_span_id]
        end = _attributed_end(branch, spans)
        siblings = [
            s
            for s in spans
            if s.parent_span_id == parent.span_id
            and s.span_id != branch.span_id
            and s.start_ns < end
            and branch.start_ns < _attributed_end(s, spans)
        ]
        if siblings:
            return end >= max(_attributed_end(s, spans) for s in siblings)
        branch = parent
    return True


def _attributed_end(span: Span, spans: list[Span]) -> int:
    """A span's end as attribution takes it: a CLIENT span's extended to the end of a
    SERVER child that started inside it (DESIGN §5 rule 3b)."""
    if span.kind is not SpanKind.CLIENT:
        return span.end_ns
    return max(
        [span.end_ns]
        + [
            s.end_ns
            for s in spans
            if s.parent_span_id == span.span_id
            and s.kind is SpanKind.SERVER
            and span.start_ns <= s.start_ns <= span.end_ns
        ]
    )


@pytest.mark.parametrize("variant", sorted(RETRIEVERS))
def test_the_retriever_is_the_retrieval_stage(zoo: Callable[[str], ZooRun], variant: str) -> None:
    # The chain retrieves and passes the question on side by side (RunnableParallel, in
    # threads): the retriever's time is retrieval when its branch finished last, else the
    # passthrough that finished last is the path and the wait before it the parallel's.
    run = zoo(variant)
    judged = [run.verdicts[r["trace_id"]] for r in run.requests(stream=True)]
    timed = [v for v in judged if v.ttft_ms is not None]
    assert len(timed) >= 5
    for verdict in timed:
        retrieval = verdict.stage("retrieval")
        spans = run.trace(verdict.trace_id)
        # On failure, the spans as they came: which branch ended last, and when.
        shown = [(s.name, s.span_id, s.parent_span_id, s.start_ns, s.end_ns) for s in spans]
        if _branch_finished_last(spans, RETRIEVERS[variant]):
            assert retrieval.ms is not None
            assert retrieval.ms > 0, (verdict.to_dict(), shown)
            assert RETRIEVERS[variant] in retrieval.breakdown, (retrieval.breakdown, shown)
        else:
            assert not retrieval.ms, (verdict.to_dict(), shown)


def test_a_chain_without_a_mark_is_incomplete_and_check_says_why(
    zoo: Callable[[str], ZooRun],
) -> None:
    run = zoo("lc-openinference")
    unmarked = [run.verdicts[r["trace_id"]] for r in run.requests("chain_no_root")]
    assert unmarked
    for verdict in unmarked:
        assert verdict.status is Status.INCOMPLETE
        assert verdict.instrumentation == "openinference"
        assert verdict.blame == ()
        assert verdict.overrun_ms == 0
        assert all(s.status in (Status.OK, Status.ABSENT) for s in verdict.stages)
    checked = run.check("--rows", "0")
    assert checked.returncode == 1, checked.stdout  # incomplete fails a check
    (hint,) = [line for line in checked.stdout.splitlines() if "have no first token" in line]
    assert hint.startswith(f"{len(unmarked)} trace(s) have no first token")
    assert "budget openinference-ttft" in hint
    assert "event First Token Stream Event" in hint
    assert "'* http send'" in hint  # the server's first body send, looked for too
    assert "their instrumentation records none here" in hint
