"""Commands of the measuring side: `check`, and `budget init` and `budget suggest` under the
`budget` group.

Each function is a typer command registered by `spanbudget.cli`; errors become exit codes
and messages here, at the edge.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from spanbudget.collector.check import FailOn
from spanbudget.terminal import make_console, print_error

DEFAULT_JAEGER_LIMIT = 100  # traces read from Jaeger when --limit is not given
DEFAULT_ROWS = 20  # traces `check`'s table shows, worst first

if TYPE_CHECKING:
    from spanbudget.collector.budget.loader import LoadedBudget
    from spanbudget.collector.check import Inputs

__all__ = ["BUDGET_HELP", "OutputFormat", "budget_app", "check", "init", "suggest"]

BUDGET_HELP = "The allocation table (default ./budget.yaml, else the packaged one)."
PRESET_HELP = (
    "Judge against a packaged preset instead of a budget file: genai, openlit, openllmetry, "
    "openinference, vllm, vllm-v0."
)
PATHS_HELP = "Trace files (OTLP JSON/JSONL/protobuf, Jaeger JSON), folders, or - for stdin."

budget_app = typer.Typer(
    help="The allocation table: write the default to edit, or propose one from traces.",
    no_args_is_help=True,
)


class OutputFormat(enum.Enum):
    TABLE = "table"
    JSON = "json"


def _fail(message: str) -> typer.Exit:
    print_error(message)
    return typer.Exit(2)


def _read_inputs(
    paths: list[Path] | None,
    jaeger_url: str | None,
    service: str | None,
    since: str,
    limit: int = DEFAULT_JAEGER_LIMIT,
) -> Inputs:
    """Spans from files (`-`: stdin) or from Jaeger's API. Usage errors and an unreadable
    Jaeger exit 2 here; each file that cannot be read is one of `Inputs.problems`."""
    from spanbudget.collector.check import Inputs, read_inputs
    from spanbudget.collector.durations import parse_duration
    from spanbudget.collector.readers import TraceReadError, read_jaeger_api

    if (jaeger_url is None) == (not paths):
        raise _fail("give trace files (- for stdin), or --jaeger-url with --service (not both)")
    if jaeger_url is None:
        return read_inputs(paths or [], sys.stdin.buffer)
    if service is None:
        raise _fail("--jaeger-url needs --service")
    try:
        seconds = parse_duration(since)
    except ValueError as exc:
        raise _fail(f"--since: {exc}") from None
    try:
        return Inputs(read_jaeger_api(jaeger_url, service, seconds, limit=limit), read=1)
    except TraceReadError as exc:
        raise _fail(str(exc)) from None


def _load(budget: Path | None, preset: str | None) -> LoadedBudget:
    """The budget file (found as every command finds it), or the preset; says which."""
    from spanbudget.collector.budget.loader import BudgetError, load_budget, load_preset
    from spanbudget.collector.budget.presets import UnknownPresetError, preset_path
    from spanbudget.collector.budget.source import find_budget

    notices = make_console(stderr=True)
    try:
        if preset is not None:
            if budget is not None:
                raise _fail("give --budget or --preset, not both (a budget file can say preset:)")
            try:
                notices.print(f"budget: preset {preset} ({preset_path(preset)})")
                loaded = load_preset(preset)
            except UnknownPresetError as exc:
                raise _fail(str(exc)) from None
        else:
            source = find_budget(budget)
            notices.print(source.describe())
            loaded = load_budget(source.path)
    except BudgetError as exc:
        raise _fail(str(exc)) from None
    for warning in loaded.warnings:
        notices.print(f"[yellow]warning:[/] {escape(warning)}")
    return loaded


def check(
    paths: Annotated[list[Path] | None, typer.Argument(help=PATHS_HELP)] = None,
    budget: Annotated[Path | None, typer.Option(help=BUDGET_HELP)] = None,
    preset: Annotated[str | None, typer.Option(help=PRESET_HELP)] = None,
    output: Annotated[
        OutputFormat, typer.Option("--format", help="A table for people, JSON for programs.")
    ] = OutputFormat.TABLE,
    fail_on: Annotated[
        FailOn, typer.Option(help="Exit 1 when a trace is at or above this status.")
    ] = FailOn.OVERRUN,
    jaeger_url: Annotated[
        str | None,
        typer.Option(
            help="Read traces from Jaeger instead of files: its query address (API v3), or"
            " that address with /api/traces (the API of Jaeger's UI)."
        ),
    ] = None,
    service: Annotated[str | None, typer.Option(help="With --jaeger-url: the service.")] = None,
    since: Annotated[str, typer.Option(help="With --jaeger-url: how far back.")] = "15m",
    limit: Annotated[
        int, typer.Option(min=1, help="With --jaeger-url: at most this many traces.")
    ] = DEFAULT_JAEGER_LIMIT,
    allow_empty: Annotated[
        bool, typer.Option("--allow-empty", help="Exit 0, not 2, when no trace was judged.")
    ] = False,
    rows: Annotated[
        int,
        typer.Option(min=0, help="The table shows this many traces, worst first (0: none)."),
    ] = DEFAULT_ROWS,
    junit: Annotated[
        Path | None,
        typer.Option(help="Also write the verdicts as JUnit XML here, for a CI's test view."),
    ] = None,
) -> None:
    """Judge traces against the budget: one verdict per trace.

    The table shows the worst --rows traces, then every stage's percentiles over all of
    them and the SLO line: the share within every limit with its 95 % (Wilson) interval.

    Exit 0 when no trace is at or above --fail-on, 1 when one is, 2 on bad input: usage, a
    budget that does not load, a file that cannot be read (reported and skipped, the rest
    judged), or no trace judged at all (unless --allow-empty). `error` (a failed request)
    and `incomplete` (no first token) count above `overrun`. `-` reads stdin.

    Example:

        spanbudget check traces.jsonl --budget budget.yaml --format json --fail-on warn

        spanbudget check --jaeger-url http://127.0.0.1:16686 --service rag-gateway --since 15m

        spanbudget check --jaeger-url http://127.0.0.1:16686/api/traces --service rag-gateway

        spanbudget check traces.jsonl --preset openinference

        otelcol-export | spanbudget check - --format json

        spanbudget check traces/ --rows 0 --junit check.xml
    """
    from spanbudget.collector.check import (
        evaluate_spans,
        exit_code,
        render_json,
        render_junit,
        render_table,
        why_empty,
    )

    loaded = _load(budget, preset)
    inputs = _read_inputs(paths, jaeger_url, service, since, limit)
    for problem in inputs.problems:
        print_error(f"{problem} (skipped)")
    result = evaluate_spans(inputs.spans, loaded.budget)
    if output is OutputFormat.JSON:
        typer.echo(render_json(result))
    else:
        render_table(result, loaded.budget, make_console(), rows=rows)
    if junit is not None:
        text = render_junit(result, loaded.budget, fail_on, problems=inputs.problems)
        try:
            junit.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise _fail(f"cannot write {junit}: {exc.strerror or exc}") from None
    if inputs.problems:
        total = inputs.read + len(inputs.problems)
        print_error(f"{len(inputs.problems)} of {total} inputs could not be read")
    reason = why_empty(result, loaded.budget)
    if reason is not None and not allow_empty:
        print_error(reason)
    raise typer.Exit(
        exit_code(
            result,
            loaded.budget,
            fail_on,
            unreadable=len(inputs.problems),
            allow_empty=allow_empty,
        )
    )


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
    from spanbudget.collector.budget.source import write_default_budget

    try:
        written = write_default_budget(path, force=force)
    except FileExistsError as exc:
        raise _fail(f"{exc} exists; edit it, or pass --force to replace it") from None
    except OSError as exc:
        raise _fail(f"cannot write {path}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {written}")


@budget_app.command()
def suggest(
    paths: Annotated[list[Path] | None, typer.Argument(help=PATHS_HELP)] = None,
    objective: Annotated[
        float,
        typer.Option(help="The SLO objective: limits are this percentile of what was observed."),
    ] = 0.95,
    preset: Annotated[
        str | None,
        typer.Option(help="Take the stages from this preset and write numbers over it."),
    ] = None,
    budget: Annotated[
        Path | None,
        typer.Option(help="Take the stages from this budget file (not looked for in ./)."),
    ] = None,
    jaeger_url: Annotated[
        str | None,
        typer.Option(
            help="Read traces from Jaeger instead of files: its query address (API v3), or"
            " that address with /api/traces (the API of Jaeger's UI)."
        ),
    ] = None,
    service: Annotated[str | None, typer.Option(help="With --jaeger-url: the service.")] = None,
    since: Annotated[str, typer.Option(help="With --jaeger-url: how far back.")] = "15m",
    limit: Annotated[
        int, typer.Option(min=1, help="With --jaeger-url: at most this many traces.")
    ] = DEFAULT_JAEGER_LIMIT,
    force: Annotated[
        bool,
        typer.Option("--force", help="Suggest from fewer than 100 judged traces anyway."),
    ] = False,
) -> None:
    """Propose a budget from observed traces: stages, and every stage's target and limit.

    Stages come from --preset, from --budget, or else from the span tree's structure. Each
    trace is judged with them as `check` would judge it. Targets are the medians of each
    stage's exclusive critical-path time; limits one common percentile of every stage,
    +10 % headroom, at least 1 ms, rounded up, at the lowest percentile (from --objective
    up) at which --objective of the same traces are within every limit jointly. The total
    is raised to the stages' sums where those are larger. Prints the YAML, with a comment
    on every number saying where it came from and its 95 % interval; it loads as it is.
    The share reached is printed on stderr. Exit 0, or 2 on bad input, when no trace has
    a first token, or from fewer than 100 judged traces (unless --force).

    Example:

        spanbudget budget suggest runs/a/traces.jsonl --preset openinference > budget.yaml

        spanbudget budget suggest traces/ --objective 0.99
    """
    from spanbudget.collector.budget.loader import BudgetError
    from spanbudget.collector.suggest.budget import (
        MIN_TRACES,
        NoTracesError,
        TooFewTracesError,
        render,
    )
    from spanbudget.collector.suggest.budget import suggest as propose

    if not 0 < objective < 1:
        raise _fail(f"--objective must be between 0 and 1, got {objective:g}")
    base = None
    origin = ""
    if preset is not None or budget is not None:
        base = _load(budget, preset).budget
        origin = f"preset {preset}" if preset is not None else f"{budget}"
    inputs = _read_inputs(paths, jaeger_url, service, since, limit)
    if inputs.problems:  # a budget from part of the traces would look whole: refuse
        for problem in inputs.problems:
            print_error(problem)
        raise typer.Exit(2)
    try:
        suggestion = propose(
            inputs.spans,
            objective=objective,
            base=base,
            origin=origin,
            min_traces=1 if force else MIN_TRACES,
        )
        typer.echo(render(suggestion, extends=preset), nl=False)
    except (NoTracesError, TooFewTracesError) as exc:
        raise _fail(str(exc)) from None
    except BudgetError as exc:  # the suggestion itself would not load: a bug, said plainly
        raise _fail(f"the suggested budget does not load: {exc}") from None
    make_console(stderr=True).print(
        f"suggested limits at the {suggestion.percentile_name} of every stage: "
        f"{suggestion.within} of {suggestion.traces} traces ({suggestion.share:.1%}) within "
        f"every limit, objective {objective:.1%}",
        highlight=False,
    )
