"""The judging core behind both the collector and `BudgetSpanProcessor`: what each step hands
its sinks, one sink's failure is no other's, the budget has one owner, a restart's stragglers
are late, flush keeps its timeout, a hold keeps every trace until it ends, and close can
leave the traces without their root to the journal."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.budget.model import Budget
from spanbudget.collector.core.assembly import Assembly
from spanbudget.collector.core.decisions import Decisions
from spanbudget.collector.core.held import HeldSpan
from spanbudget.collector.core.judging_core import JudgingCore
from spanbudget.collector.core.metrics import CollectorMetrics
from spanbudget.collector.core.processor import BudgetSpanProcessor
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.spans import Span, SpanKind

from tests.support.collector import BUDGET
from tests.support.traces import TraceBuilder, rag_trace

MS = 1_000_000


@pytest.fixture(scope="module")
def budget() -> Budget:
    return load_budget(BUDGET).budget


class Recorder:
    """A sink that keeps every step it is handed; it can hold the worker, or fail."""

    def __init__(self, name: str = "recorder", *, fail: bool = False) -> None:
        self.name = name
        self.fail = fail
        self.steps: list[Decisions] = []
        self.threads: set[str] = set()
        self.hold = threading.Event()
        self.hold.set()
        self.closed = 0

    def consume(self, decisions: Decisions) -> None:
        self.threads.add(threading.current_thread().name)
        self.hold.wait(30)
        self.steps.append(decisions)
        if self.fail:
            raise RuntimeError("this sink is down")

    def close(self) -> None:
        self.closed += 1

    def traces(self) -> dict[str, tuple[str, str | None, bool]]:
        """Trace id -> (verdict status or "", dropped, skipped), over every step."""
        return {
            t.trace_id: (t.judged.verdict.status.value if t.judged else "", t.dropped, t.skipped)
            for step in self.steps
            for t in step.traces
        }


def _core(
    budget: Budget,
    *sinks: Recorder,
    max_traces: int = 100,
    metrics: CollectorMetrics | None = None,
    between_steps: Callable[[], object] = lambda: None,
) -> JudgingCore:
    assembly = Assembly(
        decision_wait=60.0,  # nothing is due by itself: flush() decides
        max_age=600.0,
        max_traces=max_traces,
        max_spans_per_trace=100,
        decided_memory=1000,
    )
    return JudgingCore(
        budget,
        sinks,
        assembly=assembly,
        metrics=metrics or CollectorMetrics(CollectorRegistry()),
        max_queue_spans=10_000,
        between_steps=between_steps,
    )


def _held(spans: list[Span]) -> list[HeldSpan]:
    return [HeldSpan(span) for span in spans]


def _health_check(trace_id: str) -> list[Span]:
    builder = TraceBuilder(trace_id=trace_id)
    builder.add("GET /healthz", 0, 1, kind=SpanKind.SERVER, service="other")
    return builder.spans


def test_each_step_hands_every_sink_judged_skipped_dropped_and_late_traces(
    budget: Budget,
) -> None:
    first, second = Recorder("first"), Recorder("second")
    metrics = CollectorMetrics(CollectorRegistry())
    core = _core(budget, first, second, max_traces=2, metrics=metrics)
    core.start()
    try:
        judged = rag_trace(trace_id="1" * 32, retrieval=30).spans
        assert core.offer(_held(judged))
        assert core.offer(_held(_health_check("2" * 32)))
        assert core.flush(10)
        # A third trace over max_traces=2 evicts the oldest held one, unjudged.
        assert core.offer(_held(rag_trace(trace_id="3" * 32).spans))
        assert core.offer(_held(rag_trace(trace_id="4" * 32).spans))
        assert core.offer(_held(rag_trace(trace_id="5" * 32).spans))
        straggler = replace(judged[3], span_id="e" * 16)
        assert core.offer(_held([straggler]))
        assert core.flush(10)
    finally:
        core.close()
    assert first.traces() == {
        "1" * 32: ("overrun", None, False),
        "2" * 32: ("", None, True),
        "3" * 32: ("", "buffer_full", False),
        "4" * 32: ("ok", None, False),
        "5" * 32: ("ok", None, False),
    }
    assert [h.span for step in first.steps for h in step.late] == [straggler]
    assert [d.verdicts() for d in second.steps] == [d.verdicts() for d in first.steps]
    assert first.threads == {"spanbudget-worker"}
    assert (first.closed, second.closed) == (1, 1)
    registry = metrics.registry
    assert registry.get_sample_value("spanbudget_traces_skipped_total") == 1
    assert registry.get_sample_value("spanbudget_spans_late_total") == 1
    dropped = registry.get_sample_value(
        "spanbudget_traces_dropped_total", {"reason": "buffer_full"}
    )
    assert dropped == 1


def test_a_failing_sink_is_counted_and_the_next_one_still_gets_the_step(budget: Budget) -> None:
    broken, after = Recorder("broken", fail=True), Recorder("after")
    metrics = CollectorMetrics(CollectorRegistry())
    core = _core(budget, broken, after, metrics=metrics)
    core.start()
    for n in (1, 2):
        assert core.offer(_held(rag_trace(trace_id=f"{n:032x}").spans))
        assert core.flush(10)
    core.close()
    assert list(after.traces()) == [f"{1:032x}", f"{2:032x}"]
    failures = metrics.registry.get_sample_value(
        "spanbudget_export_failures_total", {"sink": "broken"}
    )
    assert failures == 2


def test_the_core_owns_the_budget_and_tells_every_sink_when_it_switches(budget: Budget) -> None:
    sink = Recorder()
    core = _core(budget, sink)
    core.start()
    renamed = replace(budget, name="rag-ttft-v2")
    try:
        assert core.offer(_held(rag_trace(trace_id="1" * 32).spans))
        assert core.flush(10)
        core.set_budget(renamed)
        assert core.budget is renamed
        assert core.flush(10)  # nothing held: the step still carries the switch
        assert core.offer(_held(rag_trace(trace_id="2" * 32).spans))
        assert core.flush(10)
    finally:
        core.close()
    assert [step.budget.name for step in sink.steps] == ["rag-ttft", "rag-ttft-v2", "rag-ttft-v2"]
    assert sink.steps[1].traces == []
    assert [v.budget for step in sink.steps for v in step.verdicts()] == ["rag-ttft", "rag-ttft-v2"]


def test_remembered_traces_are_never_judged_again(budget: Budget) -> None:
    sink = Recorder()
    core = _core(budget, sink)
    core.remember(["1" * 32])  # judged before a restart
    core.start()
    assert core.offer(_held(rag_trace(trace_id="1" * 32).spans[:2]))
    assert core.flush(10)
    with pytest.raises(RuntimeError):
        core.remember(["2" * 32])  # a running core's assembly is the worker's
    core.close()
    assert sink.traces() == {}
    assert len(sink.steps[0].late) == 2


def test_flush_waits_for_the_sinks_but_not_past_its_timeout(budget: Budget) -> None:
    slow = Recorder()
    slow.hold.clear()
    core = _core(budget, slow)
    core.start()
    assert core.offer(_held(rag_trace().spans))
    assert not core.flush(0.2)  # the sink is still busy with the trace
    slow.hold.set()
    assert core.flush(10)
    assert list(slow.traces()) == [rag_trace().trace_id]
    core.close()
    assert core.flush(0.1)  # closed: everything was judged then
    assert not core.offer(_held(rag_trace(trace_id="2" * 32).spans))  # refused after close


def test_close_judges_what_is_queued_and_held(budget: Budget) -> None:
    sink = Recorder()
    core = _core(budget, sink)
    core.start()
    for n in range(3):
        assert core.offer(_held(rag_trace(trace_id=f"{n + 1:032x}").spans))
    core.close()
    assert sorted(sink.traces()) == [f"{n + 1:032x}" for n in range(3)]
    assert sink.closed == 1


def test_close_can_leave_the_traces_without_their_root_to_whoever_keeps_them(
    budget: Budget,
) -> None:
    """`defer_rootless` (the intake journal keeps the spans): close judges the traces whose
    root came and leaves the others, which a flush before close still judges."""
    sink = Recorder()
    core = _core(budget, sink)
    core.defer_rootless()
    core.start()
    assert core.offer(_held(rag_trace(trace_id="1" * 32).spans[1:]))
    assert core.flush(10)
    assert list(sink.traces()) == ["1" * 32]  # a flush is not a close
    assert core.offer(_held(rag_trace(trace_id="2" * 32).spans))
    assert core.offer(_held(rag_trace(trace_id="3" * 32).spans[1:]))
    core.close()
    assert sorted(sink.traces()) == ["1" * 32, "2" * 32]


def test_a_hold_keeps_every_trace_until_it_ends(budget: Budget) -> None:
    sink = Recorder()
    assembly = Assembly(
        decision_wait=0.05, max_age=600.0, max_traces=100, max_spans_per_trace=100,
        decided_memory=1000,
    )  # fmt: skip
    metrics = CollectorMetrics(CollectorRegistry())
    core = JudgingCore(budget, [sink], assembly=assembly, metrics=metrics, max_queue_spans=1000)
    core.start()
    core.hold(1.0)
    held_at = time.monotonic()
    assert core.offer(_held(rag_trace(trace_id="4" * 32).spans))
    time.sleep(0.5)  # ten decision waits
    assert sink.traces() == {}
    deadline = time.monotonic() + 10
    while not sink.traces() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert time.monotonic() - held_at >= 1.0
    assert list(sink.traces()) == ["4" * 32]
    core.close()


def test_budget_span_processor_flushes_on_its_own_thread_within_its_timeout(
    budget: Budget,
) -> None:
    """force_flush judges what is held, runs the callback on the processor's thread, and
    gives up (False) after `timeout_millis` when a callback is slow."""
    seen: list[tuple[str, str]] = []
    release = threading.Event()

    def on_verdict(verdict: Verdict) -> None:
        seen.append((verdict.trace_id, threading.current_thread().name))
        release.wait(30)

    processor = BudgetSpanProcessor(budget, on_verdict, decision_wait=60.0)
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-gateway"}))
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    started = 1_760_000_000_000_000_000
    server = tracer.start_span(
        "POST /v1/chat/completions",
        kind=trace_api.SpanKind.SERVER,
        start_time=started,
        attributes={"gen_ai.response.time_to_first_chunk": 0.05},
    )
    server.end(started + 80 * MS)
    trace_id = format(server.get_span_context().trace_id, "032x")
    assert not processor.force_flush(timeout_millis=200)  # the callback is still running
    release.set()
    assert processor.force_flush(timeout_millis=10_000)
    provider.shutdown()
    assert seen == [(trace_id, "budget-processor")]


def test_spans_the_assembly_has_no_room_for_are_refused_not_evicting_traces(
    budget: Budget,
) -> None:
    """A sender faster than judging: once the assembly buffer is full, more spans are
    refused (the intake answers 503 and the sender retries) instead of pushing traces out
    before their decision, dropped unjudged. The room counts as queued for admission."""
    sink = Recorder()
    assembly = Assembly(
        decision_wait=60.0, max_age=600.0, max_traces=100, max_spans_per_trace=100,
        decided_memory=1000, max_spans=100,
    )  # fmt: skip
    metrics = CollectorMetrics(CollectorRegistry())
    core = JudgingCore(budget, [sink], assembly=assembly, metrics=metrics, max_queue_spans=50)
    core.start()
    first = [rag_trace(trace_id=f"{i + 1:032x}").spans for i in range(9)]
    held = 0  # 9 traces of 11 spans: 99 of the buffer's 100
    for spans in first:
        assert core.offer(_held(spans))
        held += len(spans)
        deadline = time.monotonic() + 10
        while assembly.span_count < held and time.monotonic() < deadline:
            time.sleep(0.01)
    assert core.queued() == 50 - (100 - held)  # the queue's bound less the buffer's room
    late = rag_trace(trace_id="9" * 32).spans
    assert not core.offer(_held(late))  # no room: refused, nothing evicted
    assert core.flush(10)
    assert sorted(sink.traces()) == sorted(spans[0].trace_id for spans in first)
    assert all(dropped is None for _, dropped, _ in sink.traces().values())
    assert core.queued() == 0
    assert core.offer(_held(late))  # room again once they were decided
    core.close()


class _SlowAssembly(Assembly):
    """An assembly whose `add` waits for `go`: the worker holds the spans it took."""

    def __init__(self, go: threading.Event, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.go = go
        self.adding = threading.Event()

    def add(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        self.adding.set()
        assert self.go.wait(10)
        return super().add(*args, **kwargs)  # type: ignore[arg-type]


def test_spans_the_worker_is_adding_count_against_the_buffers_room(budget: Budget) -> None:
    """Between taking the queue and adding it to the assembly, the worker's spans are in
    neither count: were they not counted, admission would let in what the buffer cannot
    hold, and traces would be evicted before their decision (seen under overload)."""
    go = threading.Event()
    assembly = _SlowAssembly(
        go, decision_wait=60.0, max_age=600.0, max_traces=100, max_spans_per_trace=100,
        decided_memory=1000, max_spans=100,
    )  # fmt: skip
    core = JudgingCore(
        budget, [Recorder()], assembly=assembly, max_queue_spans=100,
        metrics=CollectorMetrics(CollectorRegistry()),
    )  # fmt: skip
    core.start()
    first = [s for i in range(7) for s in rag_trace(trace_id=f"{i + 1:032x}").spans]  # 77
    assert core.offer(_held(first))
    assert assembly.adding.wait(10)  # taken from the queue, not yet in the assembly
    assert core.queued() == 77  # the buffer's room left: 23 of its 100
    more = [s for i in range(3) for s in rag_trace(trace_id=f"{i + 8:032x}").spans]  # 33
    assert not core.offer(_held(more))
    go.set()
    assert core.flush(10)
    assert core.offer(_held(more))
    core.close()


def test_between_steps_runs_on_the_worker_after_each_step_its_sinks_had(budget: Budget) -> None:
    recorder = Recorder()
    calls: list[tuple[str, int]] = []  # the thread, and the steps the sink had by then
    core = _core(
        budget,
        recorder,
        between_steps=lambda: calls.append((threading.current_thread().name, len(recorder.steps))),
    )
    core.start()
    try:
        assert core.offer(_held(rag_trace(trace_id="1" * 32).spans))
        assert core.flush(10)
        deadline = time.monotonic() + 10
        while not any(had for _, had in calls) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        core.close()
    assert any(had for _, had in calls), "not called after the step that judged the trace"
    assert {thread for thread, _ in calls} == {"spanbudget-worker"}
