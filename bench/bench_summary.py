"""The summary `make bench` prints at the end: each headline figure, its aim, and its ratio
to the floor measured in the same run (the distance to the limit, not only a number).

Each throughput figure is also set against two references of the same run: the anchor,
the spans per CPU-second of the OpenTelemetry Collector's `tail_sampling` pipeline
(bench/interop.py records it with `anchor=True`), and the decode + convert floor, the floor
bench/pipeline.py records beside its spans/s figure. A spans/s figure here is one core's,
so it compares with a per CPU-second one.

Each benchmark calls `record(...)` for its headline figures; with SPANBUDGET_BENCH_SUMMARY
set to a file path, a JSON line per figure is appended there (otherwise nothing happens).
`python bench/bench_summary.py FILE` prints the table.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ENV = "SPANBUDGET_BENCH_SUMMARY"
THROUGHPUT = ("spans/s", "spans/CPU-s")
FLOOR_BENCH = "pipeline"


def record(
    bench: str,
    figure: str,
    measured: float,
    unit: str,
    *,
    aim: str,
    floor: float | None = None,
    floor_name: str = "",
    met: bool | None = None,
    anchor: bool = False,
) -> None:
    """One figure; `floor` is the same run's limit in the same unit, `met` whether `aim` was;
    `anchor` marks the figure every throughput figure is compared with."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = {
        "bench": bench,
        "figure": figure,
        "measured": measured,
        "unit": unit,
        "aim": aim,
        "floor": floor,
        "floor_name": floor_name,
        "met": met,
        "anchor": anchor,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def references(rows: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """The run's anchor (spans per CPU-second) and decode + convert floor (spans/s), or None
    for one its bench did not record."""
    anchor = next((row["measured"] for row in rows if row.get("anchor")), None)
    floor = next(
        (
            row["floor"]
            for row in rows
            if row["bench"] == FLOOR_BENCH and row["unit"] == "spans/s" and row["floor"]
        ),
        None,
    )
    return anchor, floor


def _ratio(row: dict[str, Any], reference: float | None) -> str:
    if not reference or row["unit"] not in THROUGHPUT:
        return ""
    return f"{row['measured'] / reference:.3g}×"


def main(path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    anchor, decode = references(rows)
    table = Table(title=f"make bench: {len(rows)} figures, ratios to the same run's floors")
    columns = ("bench", "figure", "aim", "measured", "floor (same run)", "÷ floor")
    for column in (*columns, "÷ anchor", "÷ decode floor", "aim met"):
        table.add_column(column, justify="right" if column.startswith(("m", "÷")) else "left")
    for row in rows:
        floor = row["floor"]
        ratio = "" if not floor else f"{row['measured'] / floor:.3g}×"
        met = {True: "met", False: "not met", None: ""}[row["met"]]
        table.add_row(
            row["bench"],
            row["figure"],
            row["aim"],
            f"{_number(row['measured'])} {row['unit']}",
            "" if floor is None else f"{_number(floor)} {row['unit']} ({row['floor_name']})",
            ratio,
            _ratio(row, anchor),
            _ratio(row, decode),
            met,
        )
    console = Console(width=200)
    console.print(table)
    console.print(
        "anchor: the Collector's tail_sampling, "
        + ("not measured in this run" if anchor is None else f"{anchor:,.0f} spans per CPU-s")
        + " (bench/interop.py); decode floor: decode + convert on one core, "
        + ("not measured in this run" if decode is None else f"{decode:,.0f} spans/s")
        + f" (bench/{FLOOR_BENCH}.py)"
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: bench_summary.py FILE")
    main(Path(sys.argv[1]))
