"""The `spanbudget` command: a thin composition root over the `service` and `collector` CLIs.

Each command lives next to the code it drives and keeps heavy imports (torch, the
tokenizer, Qdrant) inside its body, so importing them all here keeps `spanbudget --help`
fast.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer
from spanbudget.collector.cli import budget_app, check, report
from spanbudget.collector.compare.cli import compare
from spanbudget.collector.live.cli import collect
from spanbudget.collector.loadtest.cli import loadtest
from spanbudget.collector.readers import TraceReadError, read_jaeger_api, read_traces
from spanbudget.collector.spans import Span
from spanbudget.collector.whatif.cli import whatif
from spanbudget.common.durations import parse_duration
from spanbudget.common.extras import exit_unless_installed
from spanbudget.common.terminal import HELP_WIDTH, make_console, print_error
from spanbudget.service.cli import ingest, serve
from spanbudget.service.engine.cli import engine_app
from spanbudget.service.engine.model_cli import SpanSources, calibrate_command

__all__ = ["app", "main"]

CALIBRATE_JAEGER_LIMIT = 1000  # traces `engine calibrate --jaeger-url` reads at most

app = typer.Typer(
    name="spanbudget",
    help="End-to-end latency budget tracer for LLM request paths, on OpenTelemetry.",
    no_args_is_help=True,
    add_completion=False,
    # Markdown: a help text's paragraphs are reflowed to the width, not broken where the
    # docstring's lines end; indented blocks (the examples) stay as written.
    rich_markup_mode="markdown",
)


def _print_version(asked: bool) -> None:
    if asked:
        try:
            version = metadata.version("spanbudget")
        except metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
            version = "(not installed)"
        typer.echo(f"spanbudget {version}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """End-to-end latency budget tracer for LLM request paths, on OpenTelemetry."""


# `spanbudget --help` lists them in this order.
for command in (check, compare, whatif, collect, serve, ingest, loadtest, report):
    app.command()(command)


def _jaeger_spans(url: str, service: str, since: str) -> list[Span]:
    """Spans of `service`'s traces of the last `since` from a Jaeger, as `check` reads them."""
    return read_jaeger_api(url, service, parse_duration(since), limit=CALIBRATE_JAEGER_LIMIT)


# The engine's `calibrate` reads traces with the collector's readers: joined here.
engine_app.command("calibrate")(
    calibrate_command(SpanSources(read_traces, _jaeger_spans, (TraceReadError, ValueError)))
)
app.add_typer(engine_app, name="engine")
app.add_typer(budget_app, name="budget")


def main() -> None:
    if not sys.stdout.isatty():
        # Off a terminal typer would wrap --help at 80 columns, cutting the examples.
        os.environ.setdefault("TERMINAL_WIDTH", str(HELP_WIDTH))
    app()


@app.command()
def demo(
    duration: Annotated[str, typer.Option(help="Length of the load test.")] = "30s",
    out: Annotated[Path | None, typer.Option(help="Report folder (default ./runs/RUN_ID).")] = None,
    exit_after: Annotated[
        bool, typer.Option("--exit", help="Stop after the report instead of staying up.")
    ] = False,
    data_dir: Annotated[Path, typer.Option(help="Qdrant shard, verdicts, logs.")] = Path("data"),
    budget: Annotated[
        Path | None,
        typer.Option(help="The allocation table (default ./budget.yaml, else the packaged one)."),
    ] = None,
    rate: Annotated[float, typer.Option(help="Nominal requests per second.")] = 2.0,
    burst_rate: Annotated[float, typer.Option(help="Requests per second in the burst.")] = 16.0,
    preset: Annotated[
        str, typer.Option(help="Engine emulator preset (spanbudget engine --list-presets).")
    ] = "qwen3-8b-h100",
    gateway_listen: Annotated[str, typer.Option(help="Gateway host:port.")] = "127.0.0.1:8080",
    engine_listen: Annotated[str, typer.Option(help="Engine host:port.")] = "127.0.0.1:8000",
    collector_listen: Annotated[str, typer.Option(help="Collector host:port.")] = "127.0.0.1:4318",
    disaggregated: Annotated[
        bool,
        typer.Option(
            "--disaggregated",
            help="Run the engine as a prefill and a decode instance with the KV cache moved"
            " between them; without --budget, judged with the packaged budget that has a"
            " kv_transfer stage (examples/disaggregated-budget.yaml).",
        ),
    ] = False,
    jaeger: Annotated[
        Path | None,
        typer.Option(
            help="A Jaeger v2 binary (make binaries builds one): started beside the stack on"
            " 127.0.0.1:16686, every judged trace forwarded to it, the web UI linked to it.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Run the embedded stack (engine emulator, collector, gateway) and a two-phase load test.

    No Docker, no GPU. Ingests the default corpus on first run, sends a nominal load that
    fits the budget and then a burst that makes the engine queue, prints the per-stage
    report, and stays up until Ctrl-C (or stops after the report with --exit).
    Exit 0 once the report is made (the burst is meant to break the budget), 2 when the
    stack or the run failed.

    Example:

        spanbudget demo --duration 30s --exit
        spanbudget demo --jaeger ~/.cache/spanbudget/bin/jaeger

        spanbudget demo --disaggregated
    """
    exit_unless_installed("demo")
    from spanbudget.common.durations import parse_duration

    from .demo import DemoSettings, run_demo

    try:
        duration_s = parse_duration(duration)
    except ValueError as exc:
        print_error(f"--duration: {exc}")
        raise typer.Exit(2) from None
    settings = DemoSettings(
        duration_s=duration_s,
        out=out,
        exit_after=exit_after,
        data_dir=data_dir,
        budget=budget,
        nominal_rate=rate,
        burst_rate=burst_rate,
        preset=preset,
        gateway=gateway_listen,
        engine=engine_listen,
        collector=collector_listen,
        jaeger=jaeger,
        disaggregated=disaggregated,
    )
    raise typer.Exit(run_demo(settings, make_console()))
