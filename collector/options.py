"""The options several of the collector's commands share, declared once: which budget
(`--budget`, `--preset`), the output (`--format`), and where traces come from when not from
files (`--jaeger-url` with `--service`, `--since` and `--limit`). A command takes one as
`budget: BudgetOption = None`; where its help must say more, it declares its own."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from spanbudget.common.commands import OutputFormat

__all__ = [
    "BUDGET_HELP",
    "DEFAULT_JAEGER_LIMIT",
    "PATHS_HELP",
    "BudgetOption",
    "FormatOption",
    "JaegerLimitOption",
    "JaegerServiceOption",
    "JaegerSinceOption",
    "JaegerUrlOption",
    "PresetOption",
    "TracePaths",
]

BUDGET_HELP = "The allocation table (default ./budget.yaml, else the packaged one)."
PATHS_HELP = "Trace files (OTLP JSON/JSONL/protobuf, Jaeger JSON), folders, or - for stdin."
DEFAULT_JAEGER_LIMIT = 100  # traces read from Jaeger when --limit is not given

BudgetOption = Annotated[Path | None, typer.Option("--budget", help=BUDGET_HELP)]
PresetOption = Annotated[
    str | None,
    typer.Option(
        "--preset",
        help="Judge against a packaged preset instead of a budget file: genai, openlit,"
        " openllmetry, openinference, vllm, vllm-v0.",
    ),
]
FormatOption = Annotated[
    OutputFormat, typer.Option("--format", help="A table for people, JSON for programs.")
]
TracePaths = Annotated[list[Path] | None, typer.Argument(help=PATHS_HELP)]
JaegerUrlOption = Annotated[
    str | None,
    typer.Option(
        "--jaeger-url",
        help="Read traces from Jaeger instead of files: its query address (API v3), or that"
        " address with /api/traces (the API of Jaeger's UI).",
    ),
]
JaegerServiceOption = Annotated[
    str | None, typer.Option("--service", help="With --jaeger-url: the service.")
]
JaegerSinceOption = Annotated[str, typer.Option("--since", help="With --jaeger-url: how far back.")]
JaegerLimitOption = Annotated[
    int, typer.Option("--limit", min=1, help="With --jaeger-url: at most this many traces.")
]
