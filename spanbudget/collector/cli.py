"""Commands of the measuring side: `check`, and `budget init` under the `budget` group.

Each function is a typer command registered by `spanbudget.cli`; errors become exit codes
and messages here, at the edge.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from spanbudget.collector.check import FailOn
from spanbudget.terminal import make_console, print_error

__all__ = ["BUDGET_HELP", "OutputFormat", "budget_app", "check", "init"]

BUDGET_HELP = "The allocation table (default ./budget.yaml, else the packaged one)."

budget_app = typer.Typer(
    help="The allocation table: write the default to edit.", no_args_is_help=True
)


class OutputFormat(enum.Enum):
    TABLE = "table"
    JSON = "json"


def _fail(message: str) -> typer.Exit:
    print_error(message)
    return typer.Exit(2)


def check(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Trace files (OTLP JSON/JSONL/protobuf, Jaeger JSON) or folders."),
    ] = None,
    budget: Annotated[Path | None, typer.Option(help=BUDGET_HELP)] = None,
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
    from spanbudget.collector.budget_source import find_budget
    from spanbudget.collector.check import (
        evaluate_spans,
        exit_code,
        expand_paths,
        render_json,
        render_table,
    )
    from spanbudget.collector.durations import parse_duration
    from spanbudget.collector.readers import TraceReadError, read_jaeger_api, read_traces

    notices = make_console(stderr=True)
    source = find_budget(budget)
    notices.print(source.describe())
    try:
        loaded = load_budget(source.path)
    except BudgetError as exc:
        raise _fail(str(exc)) from None
    for warning in loaded.warnings:
        notices.print(f"[yellow]warning:[/] {escape(warning)}")
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
        render_table(result, loaded.budget, make_console())
    raise typer.Exit(exit_code(result.verdicts, fail_on))


@budget_app.command()
def init(
    path: Annotated[
        Path, typer.Argument(help="Where to write it: a file, or a folder to hold budget.yaml.")
    ] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write the default allocation table (the one used when none is given) to edit.

    Every command that takes --budget reads ./budget.yaml when it is there, so after this
    the edited copy is the one in force in this directory.

    Example:

        spanbudget budget init && $EDITOR budget.yaml && spanbudget check traces.jsonl
    """
    from spanbudget.collector.budget_source import write_default_budget

    try:
        written = write_default_budget(path, force=force)
    except FileExistsError as exc:
        raise _fail(f"{exc} exists; edit it, or pass --force to replace it") from None
    except OSError as exc:
        raise _fail(f"cannot write {path}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {written}")
