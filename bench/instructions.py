"""Instructions per judged trace, counted by valgrind's callgrind: the same on a busy machine.

Run: .venv/bin/python bench/instructions.py [--traces 3000] [--against OTHER_CHECKOUT] [--quick]

Wall-clock figures on a shared machine move by 40 % between runs of the same code, more
than most changes to the evaluator. Callgrind counts the instructions the interpreter
executes, which do not depend on what else runs. Each checkout is counted twice: once
building the traces and a long-lived `Evaluator` and judging a warm-up share of them
(pass 0), once doing the same and then judging every trace (pass 1); the difference over
the number of traces is the cost of one 12-span trace, start-up and imports left out.
The floor is counted the same way: the minimal tree walk of bench/evaluate.py. Where the
compiled path is built, the pure-Python path is counted beside it.

The collector is counted the same way (`collector` rows): `collect`'s default configuration
in-process (span store, intake journal, alert rules, presets recognised; bench/pipeline.py's
traces and requests), every thread's instructions, the bodies offered as the HTTP route
offers them and judged in one step at the end (`flush`: a decision wait that never ends),
so that no timing decides how many steps there are. That is the whole collector per
trace but for the HTTP server, deterministic where bench/pipeline.py's spans/s move by a
third between runs on a shared machine.

`--against` counts a second checkout (another release) in the same run, for a ratio.
valgrind comes from Debian (`apt-get install valgrind`). `--quick` (CI) counts 200 traces
and leaves the floor and the collector out: valgrind runs Python about 50 times slower.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_COLLECTED = re.compile(r"Collected : (\d+)")


def child(root: Path, what: str, passes: int, count: int) -> None:
    """What runs under valgrind: judge `count` traces `passes` times (0 or 1)."""
    sys.path[:0] = [str(root), str(root / "bench")]
    if what == "collector":
        collector(root, passes, count)
        return
    from evaluate import make_traces, tree_walk  # the bench of the checkout counted
    from spanbudget.collector.budget.loader import load_budget
    from spanbudget.collector.judging.evaluate import Evaluator

    budget = load_budget(root / "budget.yaml").budget
    # "evaluate": the path the collector takes (compiled where built); "pure": the other.
    evaluator = Evaluator(budget, compiled=False) if what == "pure" else Evaluator(budget)
    traces = make_traces(count)
    now = datetime.now(UTC)
    for trace in traces[: max(1, count // 10)]:  # warm: memos filled, as in a long run
        evaluator.evaluate(trace, evaluated_at=now)
        tree_walk(trace)
    for _ in range(passes):
        for trace in traces:
            if what in ("evaluate", "pure"):
                evaluator.evaluate(trace, evaluated_at=now)
            else:
                tree_walk(trace)


def collector(root: Path, passes: int, count: int) -> None:
    """`collect`'s default configuration in-process, as the checkout at `root` makes it:
    a tenth of `count` traces judged to warm it, then (pass 1) `count` traces offered and
    judged in one step."""
    import sqlite3
    import tempfile

    from pipeline import PROTOBUF, make_payloads  # the bench of the checkout counted
    from spanbudget.collector.budget.loader import load_budget
    from spanbudget.collector.live.gc_settings import tune_for_throughput
    from spanbudget.collector.live.pipeline import assemble
    from spanbudget.collector.live.settings import CollectorSettings

    per_request = 40
    warm = make_payloads(max(per_request, count // 10), per_request, 1)
    payloads = make_payloads(count, per_request, 2)
    with tempfile.TemporaryDirectory() as tmp:
        settings = CollectorSettings.from_flat(
            grpc_listen="off",
            db_path=Path(tmp) / "verdicts.db",
            budget_path=root / "budget.yaml",
            decision_wait_seconds=3600.0,  # judged at `flush` only: one step, every run
            intake_queue_spans=(count + len(warm) * per_request) * 12 + 1,
            max_traces=count + len(warm) * per_request,
            retention_seconds=86400,
            retention_count=10_000_000,
            span_retention_count=100_000,
        )
        pipeline = assemble(settings, load_budget(root / "budget.yaml").budget)
        pipeline.start()
        tune_for_throughput()  # as `spanbudget collect` runs
        spans = pipeline.spans
        assert spans is not None
        for bodies in (warm, payloads)[: 1 + passes]:
            for body in bodies:
                pipeline.intake.receive(body, content_type=PROTOBUF, content_encoding=None)
            assert pipeline.core.flush(600)
            assert spans.wait_idle(600)
        pipeline.close()
        with sqlite3.connect(settings.store.db_path) as db:  # an index's count: no cost a trace
            print("judged", db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])


def count_instructions(valgrind: str, root: Path, what: str, passes: int, count: int) -> int:
    command = [
        valgrind,
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        str(root),
        what,
        str(passes),
        str(count),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed for {root} ({what}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_trace(valgrind: str, root: Path, what: str, count: int) -> float:
    base = count_instructions(valgrind, root, what, 0, count)
    judged = count_instructions(valgrind, root, what, 1, count)
    return (judged - base) / count


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=int, default=3000)
    parser.add_argument("--against", type=Path, help="another checkout to count alongside")
    parser.add_argument("--quick", action="store_true", help="a short run (CI)")
    args = parser.parse_args()
    if args.quick:
        args.traces = 200
    valgrind = shutil.which("valgrind")
    if valgrind is None:  # not a failure of `make bench`: the other figures stand
        print("instructions: valgrind is not installed (apt-get install valgrind); not counted")
        return

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "bench"))
    from bench_summary import record
    from rich.console import Console
    from rich.table import Table
    from spanbudget.collector.judging.evaluate import COMPILED

    floor = None if args.quick else per_trace(valgrind, REPO, "walk", args.traces)
    path = "compiled" if COMPILED else "pure Python, the compiled path not built"
    rows: list[tuple[str, float, float | None]] = [
        (f"this checkout, {path}", per_trace(valgrind, REPO, "evaluate", args.traces), floor)
    ]
    if COMPILED:
        pure = per_trace(valgrind, REPO, "pure", args.traces)
        rows.append(("this checkout, pure Python", pure, floor))
    if args.against is not None:
        other = args.against.resolve()
        walk = None if args.quick else per_trace(valgrind, other, "walk", args.traces)
        rows.append((str(args.against), per_trace(valgrind, other, "evaluate", args.traces), walk))

    table = Table(title=f"instructions per 12-span trace (callgrind, {args.traces} traces)")
    for column in ("checkout", "evaluate (long-lived)", "floor: tree walk", "÷ floor", "ratio"):
        table.add_column(column, justify="right")
    first = rows[0][1]
    for label, judged, floor in rows:
        table.add_row(
            label,
            f"{judged:,.0f}",
            "–" if floor is None else f"{floor:,.0f}",
            "–" if floor is None else f"{judged / floor:.1f}×",
            f"{judged / first:.3f}",
        )
    Console(width=140).print(table)
    for label, judged, _ in rows[1:]:
        print(f"{rows[0][0]} ÷ {label}: {first / judged:.3f}")
    record(
        "instructions",
        f"evaluator, instructions / 12-span trace ({path.split(',')[0]})",
        first,
        "instructions",
        aim="fewer than the release before (deterministic, not wall clock)",
        floor=rows[0][2],
        floor_name="tree walk",
    )

    # The whole collector, its default configuration in-process: its imports alone take
    # a minute under valgrind, so `--quick` leaves it out (tests/bench runs its child).
    if args.quick:
        print("collector: not counted with --quick (each count takes minutes under valgrind)")
        return
    counted = [("this checkout", per_trace(valgrind, REPO, "collector", args.traces))]
    if args.against is not None:
        counted.append((str(args.against), per_trace(valgrind, other, "collector", args.traces)))
    table = Table(
        title=f"collector, default configuration in-process: instructions per 12-span trace"
        f" (callgrind, every thread, {args.traces} traces)"
    )
    for column in ("checkout", "collector", "÷ evaluator", "ratio"):
        table.add_column(column, justify="right")
    mine = counted[0][1]
    for label, cost in counted:
        table.add_row(label, f"{cost:,.0f}", f"{cost / first:.1f}×", f"{cost / mine:.3f}")
    Console(width=140).print(table)
    for label, cost in counted[1:]:
        print(f"collector, this checkout ÷ {label}: {mine / cost:.3f}")
    record(
        "instructions",
        "collector's default configuration in-process, instructions / 12-span trace",
        mine,
        "instructions",
        aim="fewer than the release before (deterministic, not wall clock)",
    )


if __name__ == "__main__":
    main()
