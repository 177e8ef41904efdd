"""`spanbudget whatif`: the command over `sources`, `predict` and `render`; errors become
exit codes here, at the edge."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from spanbudget.common.commands import OutputFormat, usage_error
from spanbudget.common.terminal import make_console, print_error, print_notices

from ..options import BudgetOption, FormatOption, PresetOption

__all__ = ["whatif"]


def whatif(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Trace files (OTLP JSON/JSONL/protobuf, Jaeger JSON), folders, or - for stdin."
        ),
    ] = None,
    stage: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME=xF|NAME=±Nms",
            help="A stage's change: x0.8 scales its time, -20ms or +5ms shifts it. Repeatable.",
        ),
    ] = None,
    run: Annotated[
        Path | None,
        typer.Option(help="A load-test run folder: its requests.csv names the traces."),
    ] = None,
    phase: Annotated[
        str | None, typer.Option(help="With --run: only this phase's requests (e.g. burst).")
    ] = None,
    collector: Annotated[
        str | None,
        typer.Option(help="The collector that judged the traces (with --run, or --since)."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="With --collector and no --run: every trace judged in this window."),
    ] = None,
    collector_token: Annotated[
        str | None,
        typer.Option(
            envvar="SPANBUDGET_API_TOKEN", help="The collector's API token, if it asks for one."
        ),
    ] = None,
    budget: BudgetOption = None,
    preset: PresetOption = None,
    output: FormatOption = OutputFormat.TABLE,
) -> None:
    """Scale or shift stages in real traces and judge them again: what if a stage were faster?

    Each trace's spans of the changed stages are made shorter or longer, everything that
    waits on them moves (later siblings, parents' ends, the first token on its way out;
    docs/whatif.md states the rule), and the changed traces are judged again by the same
    evaluator. The table shows each stage's and TTFT's p95 before and after, how often each
    stage is blamed first before and after, and the share within budget before and after
    with its 95 % (Wilson) interval. A shift of a stage that has no time on a trace's
    critical path changes nothing there; a scale (x2) can make a parallel branch take over.

    Traces come from files (as `spanbudget check` reads them), from a load-test run whose
    spans the collector kept (--run with --collector), or from a collector's window
    (--collector with --since). Exit 0 when traces were judged, 2 on bad input.

    Example:

        spanbudget whatif traces.jsonl --stage retrieval=-20ms

        spanbudget whatif --run runs/r1 --phase burst --collector http://h:4318 --stage prefill=x0.5

        spanbudget whatif --collector http://127.0.0.1:4318 --since 15m --stage prompt=x0.8
    """
    import httpx

    from ..budget.choice import BudgetChoiceError, choose_budget
    from . import (
        SourceError,
        from_collector_window,
        from_files,
        from_run,
        parse_changes,
        predict,
        render_json,
        render_table,
    )

    try:
        chosen = choose_budget(budget, preset)
    except BudgetChoiceError as exc:
        raise usage_error(str(exc)) from None
    print_notices(chosen.described, chosen.loaded.warnings)
    table = chosen.loaded.budget
    if not stage:
        raise usage_error("give at least one --stage NAME=x0.8, NAME=-20ms or NAME=+5ms")
    try:
        changes = parse_changes(stage, table.stage_names())
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    given = sum([bool(paths), run is not None, run is None and since is not None])
    if given != 1:
        raise usage_error(
            "give trace files, or --run DIR with --collector, or --collector with --since"
        )
    if phase is not None and run is None:
        raise usage_error("--phase needs --run")
    try:
        if paths:
            source = from_files(paths, sys.stdin.buffer)
        else:
            if collector is None:
                raise usage_error("--run and --since read from a collector: give --collector URL")
            with httpx.Client(timeout=30.0) as client:
                if run is not None:
                    source = from_run(run, collector, client, phase=phase, token=collector_token)
                else:
                    assert since is not None
                    source = from_collector_window(collector, since, client, token=collector_token)
    except SourceError as exc:
        raise usage_error(str(exc)) from None
    for problem in source.problems:
        print_error(problem, label="warning")
    result = predict(source.traces, table, changes, evaluated_at=datetime.now(UTC))
    if not result.pairs:
        raise usage_error(f"no trace judged from {source.what}: nothing to change")
    if output is OutputFormat.JSON:
        typer.echo(render_json(result, source=source.what))
    else:
        render_table(result, table, make_console(), source=source.what)
    raise typer.Exit(0)
