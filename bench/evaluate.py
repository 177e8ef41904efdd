"""Evaluator cost: microseconds per judged 12-span trace of the reference path.

Run: .venv/bin/python bench/evaluate.py [--traces 5000] [--quick]

Measures side by side, in one run: the full evaluation with a long-lived `Evaluator`
(as the collector uses it) on the compiled fast path (`_judge.pyx`, where it is built)
and on the pure-Python path (the `Node` tree, what judges where no C compiler built the
other), the same with a new `Evaluator` per trace (cold selector memo), the tree keeping
its nodes for a view (`judge(keep_tree=True)`), tree assembly plus critical-path
attribution alone, and the floor: a minimal tree walk (index the spans by id, link each
to its parent, visit each once from the root), which any evaluator pays.
`--quick` runs a few hundred traces once: it checks the bench runs, not its numbers.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console
from rich.table import Table
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.attribution import assemble, attribute_window
from spanbudget.collector.judging.evaluate import COMPILED, Evaluator
from spanbudget.collector.spans import Span

from tests.support.traces import rag_trace

sys.path.insert(0, str(REPO / "bench"))
from bench_summary import record


def make_traces(count: int) -> list[list[Span]]:
    traces = []
    for i in range(count):
        builder = rag_trace(
            trace_id=f"{i:032x}", retrieval=i % 40, prefill=(i * 7) % 50, queue=(i * 3) % 30
        )
        server = builder.spans[1].span_id
        builder.add("stream.forward", 150, 300, parent=server)  # the 12th span
        traces.append(builder.spans)
    assert all(len(t) == 12 for t in traces)
    return traces


def tree_walk(trace: list[Span]) -> int:
    """The floor: index by id, link children to parents, visit every span once from the root."""
    by_id = {span.span_id: span for span in trace}
    children: dict[str | None, list[Span]] = {}
    for span in by_id.values():
        parent = span.parent_span_id if span.parent_span_id in by_id else None
        children.setdefault(parent, []).append(span)
    total = 0
    stack = list(children.get(None, []))
    while stack:
        span = stack.pop()
        total += span.end_ns - span.start_ns
        stack.extend(children.get(span.span_id, ()))
    return total


def per_trace_us(
    run: Callable[[list[Span]], object], traces: list[list[Span]], repeat: int
) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for trace in traces:
            run(trace)
        best = min(best, time.perf_counter() - start)
    return best / len(traces) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a short run (CI)")
    args = parser.parse_args()
    if args.quick:
        args.traces, args.repeat = 300, 1
    budget = load_budget(REPO / "budget.yaml").budget
    traces = make_traces(args.traces)
    now = datetime.now(UTC)
    warm = Evaluator(budget)  # the compiled path where it is built, as the collector runs
    pure = Evaluator(budget, compiled=False)

    def full(trace: list[Span]) -> object:
        return warm.evaluate(trace, evaluated_at=now)

    def full_pure(trace: list[Span]) -> object:
        return pure.evaluate(trace, evaluated_at=now)

    def cold(trace: list[Span]) -> object:
        return Evaluator(budget).evaluate(trace, evaluated_at=now)

    def reference(trace: list[Span]) -> object:
        judged = warm.judge(trace, evaluated_at=now, keep_tree=True)
        assert judged is not None
        assert judged.tree is not None
        judged.tree.release()
        return judged

    def attribution_only(trace: list[Span]) -> object:
        tree = assemble(trace)
        assert tree is not None
        uncovered = attribute_window(tree, tree.root.start, tree.root.end)
        tree.release()
        return uncovered

    path = "compiled" if COMPILED else "pure Python: the compiled path is not built"
    rows = [
        (f"evaluate (long-lived Evaluator), {path}", per_trace_us(full, traces, args.repeat)),
        *(
            [
                (
                    "evaluate (long-lived Evaluator), pure Python",
                    per_trace_us(full_pure, traces, args.repeat),
                )
            ]
            if COMPILED
            else []
        ),
        ("evaluate (new Evaluator per trace)", per_trace_us(cold, traces, args.repeat)),
        ("the tree kept for a view (keep_tree)", per_trace_us(reference, traces, args.repeat)),
        (
            "assemble + attribute only (Node tree)",
            per_trace_us(attribution_only, traces, args.repeat),
        ),
        ("floor: minimal tree walk", per_trace_us(tree_walk, traces, args.repeat)),
    ]
    baseline = rows[0][1]
    table = Table(title=f"Evaluator, 12-span traces, {args.traces} traces, best of {args.repeat}")
    table.add_column("variant")
    table.add_column("µs / trace", justify="right")
    table.add_column("traces / s", justify="right")
    table.add_column("ratio to evaluate", justify="right")
    table.add_column("÷ floor", justify="right")
    floor = rows[-1][1]
    for name, us in rows:
        table.add_row(
            name, f"{us:.1f}", f"{1e6 / us:,.0f}", f"{us / baseline:.2f}×", f"{us / floor:.1f}×"
        )
    Console(width=120).print(table)
    record(
        "evaluate",
        f"evaluate, 12-span trace (long-lived Evaluator, {path.split(':')[0]})",
        baseline,
        "µs",
        aim="≤ 20 µs (first bar ≤ 60)",
        floor=floor,
        floor_name="minimal tree walk",
        met=baseline <= 20,
    )
    if COMPILED:
        record(
            "evaluate",
            "evaluate, 12-span trace (long-lived Evaluator, pure-Python tree)",
            rows[1][1],
            "µs",
            aim="≤ 100 µs (where no C compiler builds the compiled path)",
            floor=floor,
            floor_name="minimal tree walk",
            met=rows[1][1] <= 100,
        )
    verdict = dict.fromkeys(("ok", "warn", "overrun"), 0)
    for trace in traces:
        result = warm.evaluate(trace, evaluated_at=now)
        assert result is not None
        verdict[result.status.value] = verdict.get(result.status.value, 0) + 1
    Console().print(f"verdicts in the sample: {verdict}")


if __name__ == "__main__":
    main()
