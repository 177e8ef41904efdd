"""The web UI's answer times with a full verdict store (default 100,000 verdicts).

Run: .venv/bin/python bench/ui.py [--verdicts 100000] [--repeat 15] [--quick]

Fills a verdict store (SQLite WAL, as the collector writes it) with verdicts of the
reference path's shapes spread over the last two hours, across ten load-test runs, keeps
the spans of the newest 1,000 traces, then serves the collector's app with uvicorn on
127.0.0.1 and times each page over HTTP: the first overview (which loads the in-memory
columns), then every page warm (median and p95 of --repeat requests). For scale, the
same run times `/api/summary`, the store's own SQL summary over the same verdicts, and,
in-process, the budget share's aggregation over every verdict's columns (`/api/share` and
the overview's "where the budget goes" compute it).
Aim: the overview in at most 200 ms with 100,000 verdicts. The floor is `/healthz` over
the same server and client: what any page pays for HTTP alone.
`--quick` fills 2,000 verdicts and asks each page 3 times: it checks the bench runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import httpx
from bench_summary import record
from rich.console import Console
from rich.table import Table
from spanbudget.collector.budget.loader import load_budget
from spanbudget.collector.judging.evaluate import Evaluator
from spanbudget.collector.judging.verdict import Verdict
from spanbudget.collector.live.app import app_for
from spanbudget.collector.live.pipeline import assemble
from spanbudget.collector.live.settings import CollectorSettings
from spanbudget.collector.sinks.span_store import SpanStore
from spanbudget.collector.sinks.store import VerdictStore
from spanbudget.collector.spans import Span
from spanbudget.collector.stats import min_count, slices_for
from spanbudget.collector.ui.columns import VerdictColumns

from tests.support.servers import ServerThread
from tests.support.traces import rag_trace

SHAPES = 400
RUNS = 10
SPAN_TRACES = 1000


def _shape(i: int, trace_id: str) -> list[Span]:
    return rag_trace(
        trace_id=trace_id,
        retrieval=(i * 7) % 45,
        queue=(i * 13) % 60,
        prefill=(i * 3) % 25,
        network=i % 9,
        marks=i % 97 != 0,  # now and then an incomplete trace
    ).spans


def fill(db: Path, spans_db: Path, count: int) -> tuple[list[str], list[str]]:
    """Write `count` verdicts over the last two hours; return trace ids and run ids."""
    budget = load_budget(REPO / "budget.yaml").budget
    evaluator = Evaluator(budget)
    now = time.time()
    shapes: list[Verdict] = []
    for i in range(SHAPES):
        verdict = evaluator.evaluate(_shape(i, f"{i:032x}"), evaluated_at=datetime.now(UTC))
        assert verdict is not None
        shapes.append(verdict)
    store = VerdictStore(db, retention_seconds=7 * 86400, retention_count=10_000_000)
    spans = SpanStore(
        spans_db, retention_seconds=7 * 86400, max_traces=SPAN_TRACES, max_bytes=10**9
    )
    runs = [f"bench-run-{r}" for r in range(RUNS)]
    ids: list[str] = []
    batch: list[tuple[Verdict, int]] = []
    for n in range(count):
        trace_id = f"{n + 1:032x}"
        base = shapes[n % SHAPES]
        attributes = {**base.attributes, "loadtest.run_id": runs[n * RUNS // count]}
        at = datetime.fromtimestamp(now - 7200 + 7200 * n / count, UTC)
        batch.append((replace(base, trace_id=trace_id, attributes=attributes, evaluated_at=at), 12))
        ids.append(trace_id)
        if len(batch) == 2000:
            store.write(batch)
            batch = []
        if n >= count - SPAN_TRACES:
            spans.write([_shape(n % SHAPES, trace_id)])
    store.write(batch)
    store.close()
    spans.close()
    return ids, runs


def _span_store(path: Path) -> SpanStore:
    return SpanStore(path, retention_seconds=7 * 86400, max_traces=SPAN_TRACES, max_bytes=10**9)


def share_aggregation(db: Path, repeat: int) -> list[float]:
    """ms of each stage's share of TTFT and of blame, per slice too, over every verdict."""
    names = load_budget(REPO / "budget.yaml").budget.stage_names()
    columns = VerdictColumns(db)
    selection = columns.select()
    first, last = float(selection.at.min()), float(selection.at.max())
    cut = slices_for(first, last, len(selection), per_slice=min_count(95))
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        selection.share(names, cut)
        times.append((time.perf_counter() - start) * 1000)
    columns.close()
    return times


def timed(client: httpx.Client, path: str, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verdicts", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="a short run (CI)")
    args = parser.parse_args()
    if args.quick:
        args.verdicts, args.repeat = 2_000, 3
    console = Console(width=140)  # a table the tests read: its names never wrap
    with tempfile.TemporaryDirectory() as tmp:
        db, spans_db = Path(tmp) / "verdicts.db", Path(tmp) / "spans.db"
        start = time.perf_counter()
        ids, runs = fill(db, spans_db, args.verdicts)
        console.print(
            f"filled {args.verdicts:,} verdicts in {time.perf_counter() - start:.1f} s "
            f"({db.stat().st_size / 1e6:.0f} MB); load {os.getloadavg()[0]:.2f}"
        )
        share_times = share_aggregation(db, args.repeat)
        console.print(
            f"budget share over {args.verdicts:,} verdicts' columns, 36 slices, in-process: "
            f"median {statistics.median(share_times):.1f} ms, max {max(share_times):.1f} ms "
            f"of {len(share_times)}"
        )
        settings = CollectorSettings.from_flat(
            grpc_listen="off",
            db_path=db,
            spans_db_path=spans_db,
            budget_path=REPO / "budget.yaml",
            retention_count=10_000_000,
            span_retention_count=SPAN_TRACES,
            span_retention_bytes=10**9,
        )
        # As `spanbudget collect` assembles it (alert rules too), not started: nothing
        # writes while we measure.
        pipeline = assemble(settings, load_budget(REPO / "budget.yaml").budget)
        app = app_for(pipeline)
        rows: list[tuple[str, str, list[float]]] = []
        with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=60) as client:
            rows.append(
                (
                    "overview, first (loads the columns)",
                    "/?since=all",
                    timed(client, "/?since=all", 1),
                )
            )
            pages = [
                ("overview, everything (100%)", "/?since=all"),
                ("overview, last hour (50%)", "/?since=1h"),
                ("overview, last 15 min (12.5%)", "/?since=15m"),
                ("overview, one run (10%)", f"/?since=all&run_id={runs[-1]}"),
                ("overview body refresh, everything", "/overview/body?since=all"),
                ("/api/summary, everything (SQL)", "/api/summary"),
                ("/api/share, everything (columns)", "/api/share?since=all"),
                ("/api/share, last 15 min", "/api/share?since=15m"),
                ("/api/share, one run, no slices", f"/api/share?run_id={runs[-1]}&slices=0"),
                ("trace list, first page", "/traces"),
                ("trace list, overruns blaming prefill", "/traces?status=overrun&stage=prefill"),
                ("trace list, page 20 (before=)", f"/traces?before={ids[-1000]}"),
                ("trace page (spans kept)", f"/traces/{ids[-1]}"),
                ("trace page (spans gone)", f"/traces/{ids[0]}"),
                ("load-test runs", "/runs"),
                (f"run page ({args.verdicts // RUNS:,} verdicts)", f"/runs/{runs[-1]}"),
            ]
            for name, path in pages:
                repeat = max(3, args.repeat // 3) if path.startswith("/runs/") else args.repeat
                rows.append((name, path, timed(client, path, repeat)))
            rows.append(("floor: /healthz", "/healthz", timed(client, "/healthz", args.repeat)))
        pipeline.close()
    overview = statistics.median(rows[1][2])
    table = Table(title=f"web UI with {args.verdicts:,} verdicts (HTTP on 127.0.0.1, ms)")
    for column in ("page", "requests", "median", "p95", "max", "÷ overview"):
        table.add_column(column, justify="left" if column == "page" else "right")
    for name, _, times in rows:
        ordered = sorted(times)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        median = statistics.median(ordered)
        table.add_row(
            name,
            str(len(times)),
            f"{median:.1f}",
            f"{p95:.1f}",
            f"{ordered[-1]:.1f}",
            f"{median / overview:.2f}×",
        )
    console.print(table)
    record(
        "ui",
        f"overview, {args.verdicts:,} verdicts (median)",
        overview,
        "ms",
        aim="≤ 200 ms at 100,000 verdicts",
        floor=statistics.median(rows[-1][2]),
        floor_name="/healthz",
        met=overview <= 200,
    )
    verdict = "met" if overview <= 200 else "MISSED"
    console.print(
        f"overview median {overview:.1f} ms with {args.verdicts:,} verdicts: "
        f"aim ≤ 200 ms {verdict}; load {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
