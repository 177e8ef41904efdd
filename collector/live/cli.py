"""`spanbudget collect`: the live budget collector on one listener (DESIGN §7).

Options to settings, the budget file loaded once, the collector assembled from both
(`pipeline.assemble`), its HTTP app served, and signals (SIGHUP reloads the budget,
SIGINT/SIGTERM stop).
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["collect", "run"]

log = logging.getLogger("spanbudget.collect")


def collect(
    listen: Annotated[
        str | None, typer.Option(help="HOST:PORT to listen on.", show_default="127.0.0.1:4318")
    ] = None,
    budget: Annotated[
        Path | None,
        typer.Option(help="The allocation table (default ./budget.yaml, else the packaged one)."),
    ] = None,
    db: Annotated[
        Path | None,
        typer.Option(help="SQLite verdict store (WAL).", show_default="data/verdicts.db"),
    ] = None,
    forward_otlp: Annotated[
        str | None,
        typer.Option(help="Forward every span, annotated, to this OTLP/HTTP endpoint."),
    ] = None,
    forward_keep: Annotated[
        str | None,
        typer.Option(
            help="Forward only traces with these verdict statuses (ok, warn, overrun, error,"
            " incomplete; skipped, dropped: traces not judged), plus --forward-sample of the"
            " rest. Default: every trace.",
            show_default=False,
        ),
    ] = None,
    forward_sample: Annotated[
        str | None,
        typer.Option(
            help="Share of the other traces also forwarded, 0 to 1, chosen by trace id as"
            " OTel's TraceIdRatioBased sampler does (0 with --forward-keep alone).",
            show_default=False,
        ),
    ] = None,
    alertmanager: Annotated[
        str | None, typer.Option(help="Alertmanager base URL for burn-rate alerts.")
    ] = None,
    webhook: Annotated[str | None, typer.Option(help="JSON webhook URL for alerts.")] = None,
    alert_window_scale: Annotated[
        float | None,
        typer.Option(help="Multiply every burn-rate window (e.g. 0.01 for demos and tests)."),
    ] = None,
    jaeger_ui: Annotated[
        str | None,
        typer.Option(help="Jaeger UI base URL, for trace links in alerts and the web UI."),
    ] = None,
    jaeger_url: Annotated[
        str | None,
        typer.Option(
            help="Jaeger query base URL (API v3): the web UI reads spans it no longer keeps."
        ),
    ] = None,
    pull_jaeger: Annotated[
        str | None,
        typer.Option(
            help="One view over many collectors: also judge the traces the others forwarded"
            " to this Jaeger (query address; with --pull-service).",
            show_default=False,
        ),
    ] = None,
    pull_service: Annotated[
        str | None,
        typer.Option(help="With --pull-jaeger: the service whose traces to read."),
    ] = None,
    engine_metrics: Annotated[
        str | None,
        typer.Option(
            help="The engine's Prometheus metrics (vLLM's /metrics), scraped every second:"
            " each verdict carries the waiting and running requests and the KV cache use"
            " around its request's arrival.",
            show_default=False,
        ),
    ] = None,
    decision_wait: Annotated[
        str | None,
        typer.Option(
            help="Quiet time after a trace's last span before judging it.", show_default="2s"
        ),
    ] = None,
    max_trace_age: Annotated[
        str | None,
        typer.Option(
            help="Judge a trace at this age even if it never completes.", show_default="30s"
        ),
    ] = None,
    replay_wait: Annotated[
        str | None,
        typer.Option(
            help="After a start that took spans back from the intake journal, judge no trace"
            " as complete for this long (each still by --max-trace-age): the senders' retries"
            " bring the rest in any order. Set it to their longest retry interval.",
            show_default="30s",
        ),
    ] = None,
    receiver_token: Annotated[
        str | None,
        typer.Option(
            envvar="SPANBUDGET_RECEIVER_TOKEN",
            help="Require `Authorization: Bearer TOKEN` on /v1/traces (and, without"
            " --api-token, on the web UI and /api).",
        ),
    ] = None,
    api_token: Annotated[
        str | None,
        typer.Option(
            envvar="SPANBUDGET_API_TOKEN",
            help="Require this token (Bearer, or HTTP Basic password) on the web UI and /api.",
        ),
    ] = None,
    max_body_bytes: Annotated[
        int | None,
        typer.Option(help="Largest request body, after decompression.", show_default="8 MiB"),
    ] = None,
    grpc_listen: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT for OTLP/gRPC beside OTLP/HTTP, or `off`. Left at its default, a"
            " port already taken is a warning and OTLP/HTTP goes on alone.",
            show_default="127.0.0.1:4317",
        ),
    ] = None,
    grpc_tls_cert: Annotated[
        Path | None,
        typer.Option(help="PEM certificate chain: with --grpc-tls-key, OTLP/gRPC over TLS."),
    ] = None,
    grpc_tls_key: Annotated[
        Path | None, typer.Option(help="PEM private key of --grpc-tls-cert.")
    ] = None,
    header_timeout: Annotated[
        str | None,
        typer.Option(
            help="Close a connection whose request line and headers are not all in within"
            " this long (from its start, or from the previous response).",
            show_default="10s",
        ),
    ] = None,
    body_timeout: Annotated[
        str | None,
        typer.Option(
            help="Answer 408 to an upload whose body is not all in within this long once its"
            " headers are (a slow sender holds a connection no longer).",
            show_default="30s",
        ),
    ] = None,
    retention: Annotated[
        str | None, typer.Option(help="Keep verdicts this long.", show_default="7d")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Receive OTLP traces, judge each against the budget, store, export metrics, forward.

    Spans arrive on POST /v1/traces (OTLP/HTTP: protobuf or JSON, gzip) and on OTLP/gRPC
    (TraceService/Export, 127.0.0.1:4317 unless --grpc-listen says otherwise).
    Verdicts: /api/verdicts and /api/summary; metrics: /metrics; a live view: /.

    SIGHUP reloads --budget (an invalid file keeps the old budget).
    Ctrl-C or SIGTERM judge what is buffered, drain the forwarder, close the store.
    Options not given fall back to SPANBUDGET_COLLECTOR_* environment variables.

    Example:

        spanbudget collect --budget budget.yaml --forward-otlp http://127.0.0.1:4319

        spanbudget collect --forward-otlp http://127.0.0.1:4319 \\
            --forward-keep overrun,error --forward-sample 0.05

        spanbudget collect --pull-jaeger http://127.0.0.1:16686 --pull-service rag-gateway
    """
    from pydantic import ValidationError
    from spanbudget.common.durations import parse_duration

    from .settings import CollectorSettings

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options: dict[str, Any] = {
        "listen": listen,
        "budget_path": budget,
        "db_path": db,
        "forward_otlp": forward_otlp,
        "forward_keep": forward_keep,
        "forward_sample": forward_sample,
        "alertmanager": alertmanager,
        "webhook": webhook,
        "alert_window_scale": alert_window_scale,
        "jaeger_ui": jaeger_ui,
        "jaeger_url": jaeger_url,
        "pull_jaeger": pull_jaeger,
        "pull_service": pull_service,
        "engine_metrics": engine_metrics,
        "receiver_token": receiver_token,
        "api_token": api_token,
        "max_body_bytes": max_body_bytes,
        "grpc_listen": grpc_listen,
        "grpc_tls_cert": grpc_tls_cert,
        "grpc_tls_key": grpc_tls_key,
    }
    try:
        # Durations left out stay None, so that SPANBUDGET_COLLECTOR_* (or the default) apply.
        for key, text in (
            ("decision_wait_seconds", decision_wait),
            ("max_trace_age_seconds", max_trace_age),
            ("replay_wait_seconds", replay_wait),
            ("retention_seconds", retention),
            ("header_timeout_seconds", header_timeout),
            ("body_timeout_seconds", body_timeout),
        ):
            options[key] = None if text is None else parse_duration(text)
        given = {k: v for k, v in options.items() if v is not None}
        settings = CollectorSettings.from_flat(**given)
    except ValidationError as exc:
        typer.echo(f"error: {_problems(exc, given)}", err=True)
        raise typer.Exit(2) from None
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    forward = settings.forward
    if forward.otlp is None and (forward.keep is not None or forward.sample is not None):
        log.warning("--forward-keep and --forward-sample do nothing without --forward-otlp")
    raise typer.Exit(run(settings))


# Settings whose flag is not their name with dashes.
_FLAGS = {
    "budget_path": "--budget",
    "db_path": "--db",
    "decision_wait_seconds": "--decision-wait",
    "max_trace_age_seconds": "--max-trace-age",
    "replay_wait_seconds": "--replay-wait",
    "retention_seconds": "--retention",
    "header_timeout_seconds": "--header-timeout",
    "body_timeout_seconds": "--body-timeout",
}


def _problems(exc: Any, given: dict[str, Any]) -> str:
    """A settings error on one line, each problem named by the flag, or the environment
    variable, that gave the value."""
    from .settings import ENV_PREFIX, CollectorSettings

    flat_of = {where: flat for flat, where in CollectorSettings.flat_names().items()}
    problems = []
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:  # a rule over several settings names its flags itself
            problems.append(message)
            continue
        field = flat_of.get(tuple(str(part) for part in error["loc"]), str(error["loc"][-1]))
        if field in given:
            where = _FLAGS.get(field, "--" + field.replace("_", "-"))
        else:
            where = f"{ENV_PREFIX}{field.upper()}"
        problems.append(f"{where}: {message} (got {error['input']!r})")
    return "; ".join(problems)


def run(settings: Any) -> int:
    """Run the collector until SIGINT/SIGTERM; return the exit code."""
    from spanbudget.common.serving import parse_listen, serve

    from ..budget.loader import BudgetError, load_budget
    from ..budget.source import find_budget
    from ..judging.evaluate import COMPILED
    from .app import app_for
    from .gc_settings import tune_for_throughput
    from .pipeline import assemble

    source = find_budget(settings.budget_path)
    log.info("%s", source.describe())
    try:
        loaded = load_budget(source.path)
    except (BudgetError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    for warning in loaded.warnings:
        log.warning("budget: %s", warning)
    pipeline = assemble(settings, loaded.budget)
    pipeline.start()

    def reload(_signum: int, _frame: object) -> None:
        # Off the signal frame: loading YAML there could interrupt the event loop mid-step.
        threading.Thread(target=pipeline.reload_budget, args=(source.path,), daemon=True).start()

    signal.signal(signal.SIGHUP, reload)
    forwarder = pipeline.forwarder
    log.info(
        "spanbudget collector listening on http://%s:%d (budget %r from %s, store %s,"
        " decision wait %gs, %s evaluator%s)",
        *parse_listen(settings.listen),
        loaded.budget.name,
        source.path,
        settings.store.db_path,
        settings.assembly.decision_wait_seconds,
        "compiled" if COMPILED else "pure-Python (the compiled one is not built)",
        f", forwarding {forwarder.policy.describe()} to {settings.forward.traces_url}"
        if forwarder
        else "",
    )
    if pipeline.pull is not None:
        log.info(
            "judging the traces of %r found in Jaeger at %s too",
            settings.pull.service,
            settings.pull.jaeger,
        )
    tune_for_throughput()
    started = False
    try:
        started = serve(
            app_for(pipeline),
            settings.listen,
            header_timeout=settings.intake.header_timeout_seconds,
        )
    finally:
        log.info("shutting down: judging buffered traces, draining the forwarder")
        pipeline.close()
        log.info("collector stopped")
    return 0 if started else 1
