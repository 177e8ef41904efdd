"""The request shapes of issue 44 under each library, judged by `spanbudget check`'s rules
with no preset: each trace recognised as its library's; streams add up to their first
token stage by stage; a call not streamed and a model list left out of the TTFT SLO; the
verdict's model and tokens those of the chat call that streamed (never an embeddings
call's, never the first of two calls')."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from spanbudget.collector.judging.verdict import Status

from tests.collector.budget.presets.marks import LIBRARIES, llm_call, root_of
from tests.collector.budget.presets.venvs import REQUIREMENTS
from tests.collector.budget.presets.zoo import VARIANTS, ZooRun, library_of

pytestmark = pytest.mark.slow

APP_SLEEP_MS = 3.0  # the zoo's app works this long in its root span before it calls
MODEL = "zoo-model"  # the chat model the app asks for; embeddings are zoo-embed
OUTPUT_TOKENS = 8
CHAIN_INPUT_TOKENS = 26  # the chain's prompt with its two retrieved documents, as counted


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_app_ran_offline_with_the_pinned_packages(run: ZooRun) -> None:
    report = run.report
    assert report["network_attempts"] == []
    assert report["errors"] == []
    installed = {normalized(name): v for name, v in report["versions"].items()}
    for pin in REQUIREMENTS[library_of(run.variant)]:
        name, version = pin.split("==")
        assert installed[normalized(name)] == version, pin
    assert len(report["requests"]) >= 8
    assert all(r["trace_id"] for r in report["requests"] if r["shape"] != "models.list")


def test_each_trace_is_recognised_as_its_library(run: ZooRun) -> None:
    """Every trace the app made is judged by its library's preset; what is recognised as
    none is a trace with no LLM call, and vLLM's span alone is vLLM's."""
    library = LIBRARIES[run.variant]
    for request in run.requests():
        if request["trace_id"] is None:
            continue
        verdict = run.verdicts[request["trace_id"]]
        if verdict.status is not Status.NOT_APPLICABLE:
            assert verdict.instrumentation == library.instrumentation, request["shape"]
    for verdict in run.verdicts.values():
        if verdict.instrumentation is None:
            assert verdict.status is Status.NOT_APPLICABLE, verdict.to_dict()
        else:
            assert verdict.instrumentation in (library.instrumentation, "vllm")
        assert verdict.budget == f"{verdict.instrumentation or 'rag'}-ttft"


def test_streams_add_up_to_their_first_token(run: ZooRun) -> None:
    for request in run.requests(stream=True):
        verdict = run.verdicts[request["trace_id"]]
        if verdict.ttft_ms is None:
            continue  # test_langchain: a chain whose trace holds no mark
        parts = [s.ms for s in verdict.stages if s.ms is not None]
        assert round(sum(parts) + verdict.unattributed_ms, 2) == verdict.ttft_ms
        llm = verdict.stage("llm")
        assert llm.ms is not None
        assert llm.ms > 0, (request["shape"], verdict.to_dict())
        if request["root"]:
            app = verdict.stage("app")
            assert app.ms is not None
            assert app.ms >= APP_SLEEP_MS
            assert "handle question" in app.breakdown


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_call_not_streamed_is_left_out_of_the_ttft_slo(
    zoo: Callable[[str], ZooRun], variant: str
) -> None:
    """Recognised as not streamed (each library's own flag, else the server's single body
    message), with its response time: from the root's start to the LLM call's end."""
    run = zoo(variant)
    (request,) = run.requests("non_stream", "chain_invoke")
    verdict = run.verdicts[request["trace_id"]]
    assert verdict.status is Status.NOT_STREAMED
    assert not verdict.status.in_slo
    assert verdict.ttft_ms is None
    assert verdict.first_token is None
    assert verdict.blame == ()
    spans = run.trace(request["trace_id"])
    root = root_of(spans)
    assert verdict.response_ms == round((llm_call(variant, spans).end_ns - root.start_ns) / 1e6, 2)
    assert verdict.response_ms <= (request["done_ns"] - root.start_ns) / 1e6  # the client's


@pytest.mark.parametrize("variant", [v for v in VARIANTS if not v.startswith("lc-")])
def test_a_model_list_is_not_applicable(zoo: Callable[[str], ZooRun], variant: str) -> None:
    """`models.list()` calls no model: where the library makes a span of it (OpenInference's
    SyncPage[Model], OpenLIT's httpx GET), the trace is not_applicable, outside the SLO;
    where it makes none, the app has no trace of it."""
    run = zoo(variant)
    (request,) = run.requests("models.list")
    expected = LIBRARIES[variant].models_list
    if expected is None:
        assert request["trace_id"] is None
        return
    verdict = run.verdicts[request["trace_id"]]
    assert verdict.status.value == expected
    assert not verdict.status.in_slo
    assert verdict.ttft_ms is None
    assert verdict.blame == ()
    assert all(s.status in (Status.OK, Status.ABSENT) for s in verdict.stages)


def test_the_verdicts_model_and_tokens_are_the_chat_calls(run: ZooRun) -> None:
    """In a RAG request the embeddings call names zoo-embed and 4 input tokens; with two
    calls the first was not streamed: the verdict names the call that gave the answer."""
    for request in run.requests():
        if request["shape"] == "models.list":
            continue
        attributes = run.verdicts[request["trace_id"]].attributes
        assert attributes["gen_ai.request.model"] == MODEL, request["shape"]
        usage = request.get("usage", {"input": CHAIN_INPUT_TOKENS, "output": OUTPUT_TOKENS})
        assert attributes["gen_ai.usage.input_tokens"] == usage["input"], request["shape"]
        assert attributes["gen_ai.usage.output_tokens"] == usage["output"], request["shape"]
