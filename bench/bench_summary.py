"""The summary `make bench` prints at the end: each headline figure, its aim, and its ratio
to the floor measured in the same run (the distance to the limit, not only a number).

Each benchmark calls `record(...)` for its headline figures; with SPANBUDGET_BENCH_SUMMARY
set to a file path, a JSON line per figure is appended there (otherwise nothing happens).
`python bench/bench_summary.py FILE` prints the table.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ENV = "SPANBUDGET_BENCH_SUMMARY"


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
) -> None:
    """One figure; `floor` is the same run's limit in the same unit, `met` whether `aim` was."""
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
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def main(path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    table = Table(title=f"make bench: {len(rows)} figures, ratios to the same run's floors")
    for column in ("bench", "figure", "aim", "measured", "floor (same run)", "÷ floor", "aim met"):
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
            met,
        )
    Console(width=200).print(table)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: bench_summary.py FILE")
    main(Path(sys.argv[1]))
