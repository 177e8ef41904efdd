"""Commands of the measuring side: `check`, `report`, and `budget init` and `budget suggest`
under the `budget` group.

Each function is a typer command registered by `spanbudget.app.cli`; errors become exit codes
and messages here, at the edge.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from spanbudget.common.commands import OutputFormat, usage_error
from spanbudget.common.terminal import make_console, print_error, print_notices

from .check import FailOn
from .options import (
    BUDGET_HELP,
    DEFAULT_JAEGER_LIMIT,
    BudgetOption,
    FormatOption,
    JaegerLimitOption,
    JaegerServiceOption,
    JaegerSinceOption,
    JaegerUrlOption,
    PresetOption,
    TracePaths,
)

DEFAULT_ROWS = 20  # traces `check`'s table shows, worst first

if TYPE_CHECKING:
    from .budget.loader import LoadedBudget
    from .check import Inputs

__all__ = ["OutputFormat", "budget_app", "check", "init", "report", "suggest"]

budget_app = typer.Typer(
    help="The allocation table: write the default to edit, or propose one from traces.",
    no_args_is_help=True,
)


def _read_inputs(
    paths: list[Path] | None,
    jaeger_url: str | None,
    service: str | None,
    since: str,
    limit: int = DEFAULT_JAEGER_LIMIT,
) -> Inputs:
    """Spans from files (`-`: stdin) or from Jaeger's API. Usage errors and an unreadable
    Jaeger exit 2 here; each file that cannot be read is one of `Inputs.problems`."""
    from spanbudget.common.durations import parse_duration

    from .check import Inputs, read_inputs
    from .readers import TraceReadError, read_jaeger_api

    if (jaeger_url is None) == (not paths):
        raise usage_error(
            "give trace files (- for stdin), or --jaeger-url with --service (not both)"
        )
    if jaeger_url is None:
        return read_inputs(paths or [], sys.stdin.buffer)
    if service is None:
        raise usage_error("--jaeger-url needs --service")
    try:
        seconds = parse_duration(since)
    except ValueError as exc:
        raise usage_error(f"--since: {exc}") from None
    try:
        return Inputs(read_jaeger_api(jaeger_url, service, seconds, limit=limit), read=1)
    except TraceReadError as exc:
        raise usage_error(str(exc)) from None


def _load(budget: Path | None, preset: str | None) -> LoadedBudget:
    """The budget file (found as every command finds it), or the preset; says which."""
    from .budget.choice import BudgetChoiceError, choose_budget

    try:
        chosen = choose_budget(budget, preset)
    except BudgetChoiceError as exc:
        raise usage_error(str(exc)) from None
    print_notices(chosen.described, chosen.loaded.warnings)
    return chosen.loaded


def check(
    paths: TracePaths = None,
    budget: BudgetOption = None,
    preset: PresetOption = None,
    output: FormatOption = OutputFormat.TABLE,
    fail_on: Annotated[
        FailOn, typer.Option(help="Exit 1 when a trace is at or above this status.")
    ] = FailOn.OVERRUN,
    jaeger_url: JaegerUrlOption = None,
    service: JaegerServiceOption = None,
    since: JaegerSinceOption = "15m",
    limit: JaegerLimitOption = DEFAULT_JAEGER_LIMIT,
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
    from .check import (
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
            raise usage_error(f"cannot write {junit}: {exc.strerror or exc}") from None
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
    from .budget.source import write_default_budget

    try:
        written = write_default_budget(path, force=force)
    except FileExistsError as exc:
        raise usage_error(f"{exc} exists; edit it, or pass --force to replace it") from None
    except OSError as exc:
        raise usage_error(f"cannot write {path}: {exc.strerror or exc}") from None
    typer.echo(f"wrote {written}")


@budget_app.command()
def suggest(
    paths: TracePaths = None,
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
    jaeger_url: JaegerUrlOption = None,
    service: JaegerServiceOption = None,
    since: JaegerSinceOption = "15m",
    limit: JaegerLimitOption = DEFAULT_JAEGER_LIMIT,
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
    from .budget.loader import BudgetError, load_preset
    from .suggest.budget import (
        MIN_TRACES,
        NoTracesError,
        TooFewTracesError,
        recognised,
        render,
    )
    from .suggest.budget import suggest as propose

    if not 0 < objective < 1:
        raise usage_error(f"--objective must be between 0 and 1, got {objective:g}")
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
    spans = inputs.spans
    if base is None:  # the instrumentation that made most of them gives the stages
        found = recognised(spans)
        if found is not None:
            preset, spans = found.preset, found.spans
            base = load_preset(found.preset).budget
            origin = f"preset {preset}, recognised in {found.traces} of {found.of} traces"
            print_notices(f"budget: {origin}", ())
    try:
        suggestion = propose(
            spans,
            objective=objective,
            base=base,
            origin=origin,
            min_traces=1 if force else MIN_TRACES,
        )
        typer.echo(render(suggestion, extends=preset), nl=False)
    except (NoTracesError, TooFewTracesError) as exc:
        raise usage_error(str(exc)) from None
    except BudgetError as exc:  # the suggestion itself would not load: a bug, said plainly
        raise usage_error(f"the suggested budget does not load: {exc}") from None
    make_console(stderr=True).print(
        f"suggested limits at the {suggestion.percentile_name} of every stage: "
        f"{suggestion.within} of {suggestion.traces} traces ({suggestion.share:.1%}) within "
        f"every limit, objective {objective:.1%}",
        highlight=False,
    )


def report(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="A load test's --out folder; or trace files (OTLP JSON/JSONL/protobuf,"
            " Jaeger JSON), folders of them, or - for stdin, judged here."
        ),
    ],
    budget: Annotated[
        Path | None,
        typer.Option(help="With trace files: " + BUDGET_HELP[:1].lower() + BUDGET_HELP[1:]),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(help="With trace files: judge against a packaged preset instead."),
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option("--format", help="A table for people; JSON: the budget share, as /api/share."),
    ] = OutputFormat.TABLE,
    slices: Annotated[
        int, typer.Option(min=0, help="The share over time in at most this many slices (0: none).")
    ] = 12,
) -> None:
    """Render a finished run's report again from its files (and rewrite report.html), or
    judge trace files; either way, show where the budget went.

    The budget share: each stage's share of the summed time to first token (its exclusive
    time on the critical path over the TTFTs, unattributed time as a row of its own) and
    its share of the overruns' blame (the overruns whose blame names it first, with a 95 %
    Wilson interval), overall and per time slice (docs/budget-share.md).

    Exit, for a run folder: 0 when its objective was met, 1 when not, 2 when the folder is
    not a run. For trace files: 0, or 2 when a file cannot be read (the rest is judged and
    shown) or no trace was judged.

    Example:

        spanbudget report runs/run-3f2a9c1e

        spanbudget report traces.jsonl --budget budget.yaml

        spanbudget report traces/ --preset openinference --format json --slices 0
    """
    import json
    from datetime import UTC, datetime

    from .check import evaluate_spans, read_inputs
    from .loadtest.folder import (
        NotARunError,
        is_run_folder,
        judged_requests,
        read_run,
    )
    from .loadtest.render_html import render_html
    from .loadtest.render_terminal import render_terminal
    from .stats import ShareRow, render_share, share_over_time

    console = make_console()
    first = paths[0]
    if len(paths) == 1 and (is_run_folder(first) or (not first.exists() and not first.suffix)):
        if budget is not None or preset is not None:
            raise usage_error(
                "--budget and --preset are for trace files; a run folder keeps its verdicts"
            )
        try:
            run = read_run(first)
            page = render_html(run.report, run.results)
        except NotARunError as exc:  # exit 1 means "breached": this must not look like one
            raise usage_error(str(exc)) from None
        data = run.report
        share = share_over_time(judged_requests(run.results), [s.name for s in data.stages], slices)
        if output is OutputFormat.JSON:
            described = {"budget": data.budget_name, "run_id": data.info.run_id}
            typer.echo(json.dumps(share.to_dict() | described, indent=2))
        else:
            render_terminal(data, console)
            render_share(
                share,
                console,
                title=f"where the budget went in run {data.info.run_id}",
                period=f"in run {data.info.run_id}",
                clock=lambda t: f"+{t:g} s",
            )
        (first / "report.html").write_text(page)
        raise typer.Exit(0 if data.slo_met else 1)

    loaded = _load(budget, preset)
    inputs = read_inputs(paths, sys.stdin.buffer)
    for problem in inputs.problems:
        print_error(f"{problem} (skipped)")
    result = evaluate_spans(inputs.spans, loaded.budget)
    if not result.verdicts:
        raise usage_error(
            f"no trace judged: no span read matched a stage of budget {loaded.budget.name!r}"
        )
    judged = [
        ShareRow.of(v, at=at) for v, at in zip(result.verdicts, result.started_s, strict=True)
    ]
    share = share_over_time(judged, loaded.budget.stage_names(), slices)
    if output is OutputFormat.JSON:
        typer.echo(json.dumps(share.to_dict() | {"budget": loaded.budget.name}, indent=2))
    else:
        render_share(
            share,
            console,
            title=f"where the budget went: {share.traces} traces, budget {loaded.budget.name}",
            period="across these traces",
            clock=lambda t: datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S"),
        )
    if inputs.problems:  # the rest was judged and shown; the exit says something was missed
        total = inputs.read + len(inputs.problems)
        print_error(f"{len(inputs.problems)} of {total} inputs could not be read")
    raise typer.Exit(2 if inputs.problems else 0)
