"""A run's files: `requests.csv` (one row per request) and `report.json`."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["REPORT_JSON", "REQUESTS_CSV", "read_rows", "write_report_json", "write_rows"]

REQUESTS_CSV = "requests.csv"
REPORT_JSON = "report.json"
_INTS = ("index", "status_code", "output_tokens")
_TEXT = ("phase", "error", "trace_id", "verdict_status", "blame")


def write_rows(path: Path, columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows as written: numbers back as numbers, empty cells as None (text stays text)."""
    rows: list[dict[str, Any]] = []
    with path.open(newline="") as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {}
            for key, text in raw.items():
                if key in _TEXT:
                    row[key] = text
                elif text == "":
                    row[key] = None
                elif key in _INTS:
                    row[key] = int(text)
                else:
                    row[key] = float(text)
            rows.append(row)
    return rows


def write_report_json(path: Path, report: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(report, indent=2) + "\n")
