"""Commands of the measuring side: `check` (and, as they land, `collect`, `loadtest`, `report`).

Each function is a typer command registered by `spanbudget.cli`; errors become exit codes
and messages here, at the edge.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from spanbudget.collector.check import FailOn

__all__ = ["OutputFormat", "check"]

DEFAULT_BUDGET = Path("budget.yaml")


class OutputFormat(enum.Enum):
    TABLE = "table"
    JSON = "json"


def _fail(message: str) -> typer.Exit:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(2)


def check(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Trace files (OTLP JSON/JSONL/protobuf, Jaeger JSON) or folders."),
    ] = None,
    budget: Annotated[Path, typer.Option(help="The allocation table.")] = DEFAULT_BUDGET,
    output: Annotated[
        OutputFormat, typer.Option("--format", help="A table for people, JSON for programs.")
    ] = OutputFormat.TABLE,
    fail_on: Annotated[
        FailOn, typer.Option(help="Exit 1 when a trace is at or above this status.")
    ] = FailOn.OVERRUN,
    jaeger_url: Annotated[
        str | None, typer.Option(help="Read traces from Jaeger's /api/v3 instead of files.")
    ] = None,
    service: Annotated[str | None, typer.Option(help="With --jaeger-url: the service.")] = None,
    since: Annotated[str, typer.Option(help="With --jaeger-url: how far back.")] = "15m",
) -> None:
    """Judge traces against the budget: one verdict per trace.

    Exit 0 when no trace is at or above --fail-on, 1 when one is, 2 on bad input.
    `error` (a failed request) and `incomplete` (no first token) count above `overrun`.

    Example:

        spanbudget check traces.jsonl --budget budget.yaml --format json --fail-on warn

        spanbudget check --jaeger-url http://127.0.0.1:16686 --service rag-gateway --since 15m
    """
    from spanbudget.collector.budget_file import BudgetError, load_budget
    from spanbudget.collector.check import (
        evaluate_spans,
        exit_code,
        expand_paths,
        render_json,
        render_table,
    )
    from spanbudget.collector.durations import parse_duration
    from spanbudget.collector.readers import TraceReadError, read_jaeger_api, read_traces

    try:
        loaded = load_budget(budget)
    except BudgetError as exc:
        raise _fail(str(exc)) from None
    for warning in loaded.warnings:
        Console(stderr=True).print(f"[yellow]warning:[/] {warning}", highlight=False)
    if (jaeger_url is None) == (not paths):
        raise _fail("give trace files, or --jaeger-url with --service (not both)")
    try:
        if jaeger_url is not None:
            if service is None:
                raise _fail("--jaeger-url needs --service")
            try:
                seconds = parse_duration(since)
            except ValueError as exc:
                raise _fail(f"--since: {exc}") from None
            spans = read_jaeger_api(jaeger_url, service, seconds)
        else:
            spans = []
            for path in expand_paths(paths or []):
                spans.extend(read_traces(path))
    except TraceReadError as exc:
        raise _fail(str(exc)) from None
    result = evaluate_spans(spans, loaded.budget)
    if output is OutputFormat.JSON:
        typer.echo(render_json(result))
    else:
        render_table(result, loaded.budget, Console())
    raise typer.Exit(exit_code(result.verdicts, fail_on))
