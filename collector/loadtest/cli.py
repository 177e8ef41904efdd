"""`spanbudget loadtest`: a thin command over `collector.loadtest`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from spanbudget.common.commands import usage_error
from spanbudget.common.terminal import make_console, print_error

from ..options import BudgetOption
from .schedule import Arrival

__all__ = ["loadtest"]


def loadtest(
    target: Annotated[str, typer.Option(help="The gateway's base URL.")],
    rate: Annotated[
        float | None, typer.Option(help="Requests per second (open loop; default 2).")
    ] = None,
    duration: Annotated[
        str | None,
        typer.Option(
            help="How long to send, e.g. 30s (default without --requests); with --sweep, "
            "each step, lengthened to the 72 requests that bound a p95 (up to 120 s)."
        ),
    ] = None,
    requests: Annotated[
        int | None, typer.Option(help="Send exactly this many (with --sweep: each step).")
    ] = None,
    sweep: Annotated[
        str | None,
        typer.Option(
            metavar="FROM:TO:STEP",
            help="Step the rate (req/s), one run a step (RUN_ID-r8 in OUT/r8); report per "
            "stage the highest rate whose p95 stays within its limit, and which stage "
            "breaks first. Writes sweep.json and sweep.html into --out.",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Folder for the report files.")] = None,
    collector: Annotated[
        str | None,
        typer.Option(
            help="The budget collector (default http://127.0.0.1:4318): verdicts come from "
            "it, and spans go there unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT routes them."
        ),
    ] = None,
    budget: BudgetOption = None,
    arrival: Annotated[Arrival, typer.Option(help="Gaps between requests.")] = Arrival.POISSON,
    max_concurrency: Annotated[int, typer.Option(help="Requests in flight at most.")] = 256,
    prompts: Annotated[
        Path | None, typer.Option(help='JSONL of {"prompt": ..., "max_tokens": ...}.')
    ] = None,
    api_key: Annotated[str | None, typer.Option(help="Bearer key for the gateway.")] = None,
    collector_token: Annotated[
        str | None,
        typer.Option(
            envvar="SPANBUDGET_API_TOKEN", help="The collector's API token, if it asks for one."
        ),
    ] = None,
    run_id: Annotated[str | None, typer.Option(help="Name the run (default: random).")] = None,
    warmup: Annotated[int, typer.Option(help="Untimed requests sent first.")] = 0,
    model: Annotated[
        str | None, typer.Option(help="Model name (default: the first listed).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed for arrivals and prompt order.")] = 0,
    jaeger_ui: Annotated[str, typer.Option(help="Jaeger UI base URL, for links.")] = "",
    delay: Annotated[
        str | None,
        typer.Option(
            metavar="STAGE=MS[,STAGE=MS]",
            help="Ask the gateway to slow these stages on every request (the "
            "x-spanbudget-delay header; honoured by a gateway started with --faults): "
            "gateway, retrieval or prompt, e.g. retrieval=15.",
        ),
    ] = None,
) -> None:
    """Drive the gateway at a fixed schedule; report every stage against the budget.

    Every request is a traced root span; its verdict is joined from the collector.
    Writes report.json, requests.csv and report.html into --out (default runs/RUN_ID).
    Exit 0 within the budget's objective, 1 breached, 2 the run itself failed.
    With --sweep, a run per rate, then the knee per stage: exit 0 when every step held
    the objective, 1 when one breached it, 2 when a step failed.

    Example:

        spanbudget loadtest --target http://127.0.0.1:8080 --rate 4 --duration 30s --out runs/a

        spanbudget loadtest --target http://127.0.0.1:8080 --sweep 2:14:3 --out runs/knee

        spanbudget loadtest --target http://127.0.0.1:8080 --delay retrieval=15 --out runs/slow
    """
    from spanbudget.common.durations import parse_duration

    from ..budget.loader import BudgetError, load_budget
    from ..budget.source import find_budget
    from .client import parse_delay
    from .run import (
        EXIT_FAILED,
        LoadTest,
        RunFailed,
        load_prompts,
        new_run_id,
    )
    from .schedule import Phase
    from .sweep import parse_sweep
    from .sweep_run import SweepRun
    from .tracer import DEFAULT_COLLECTOR, loadtest_tracer_provider

    source = find_budget(budget)
    make_console(stderr=True).print(source.describe())
    try:
        table = load_budget(source.path).budget
    except BudgetError as exc:
        raise usage_error(str(exc)) from None
    run_id = run_id or new_run_id("sweep" if sweep else "run")
    if duration is not None and requests is not None:
        raise usage_error("give --duration or --requests, not both")
    if sweep is not None and rate is not None:
        raise usage_error("give --rate or --sweep, not both")
    try:
        rates = parse_sweep(sweep) if sweep is not None else [rate or 2.0]
        seconds = parse_duration(duration) if duration else (None if requests else 30.0)
        header = parse_delay(delay) if delay else ""
        phase = Phase("main", rates[0], duration_s=seconds, requests=requests)
        test = LoadTest(
            target=target,
            collector=collector or DEFAULT_COLLECTOR,
            budget=table,
            phases=[phase],
            out=out or Path("runs") / run_id,
            arrival=arrival,
            model=model,
            prompts=load_prompts(prompts),
            seed=seed,
            max_concurrency=max_concurrency,
            api_key=api_key,
            collector_token=collector_token,
            warmup=warmup,
            ui_url=collector or DEFAULT_COLLECTOR,
            jaeger_ui=jaeger_ui,
            run_id=run_id,
            delay=header,
        )
    except (ValueError, RunFailed) as exc:
        raise usage_error(str(exc)) from None
    provider = loadtest_tracer_provider(collector)
    console = make_console()
    try:
        if sweep is not None:
            _, code = SweepRun(test, rates, seconds, requests).run(provider, console)
        else:
            _, code = test.run(provider, console)
    except RunFailed as exc:
        print_error(str(exc), label="run failed")
        code = EXIT_FAILED
    finally:
        provider.shutdown()
    raise typer.Exit(code)
