"""`spanbudget serve` and `spanbudget ingest`: thin commands over the gateway library
(heavy imports stay inside the function bodies so `spanbudget --help` stays fast)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from spanbudget.common.extras import exit_unless_installed

__all__ = ["ingest", "serve"]


def _settings(**overrides: Any) -> Any:
    """Settings from options then environment; a bad value is a usage error, not a traceback."""
    from pydantic import ValidationError

    from .settings import Settings

    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise typer.BadParameter(problems) from None


def _seconds(option: str, text: str | None) -> float | None:
    """A duration option (`10s`, `500ms`) in seconds; None when not given."""
    from spanbudget.common.durations import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def serve(
    listen: Annotated[str | None, typer.Option(help="host:port to listen on.")] = None,
    llm_base_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible LLM server, e.g. vLLM.")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where the Qdrant Edge shard lives.")
    ] = None,
    faults: Annotated[
        bool, typer.Option("--faults", help="Honour the x-spanbudget-delay header.")
    ] = False,
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
            help="Answer 408 to a request whose body is not all in within this long once"
            " its headers are.",
            show_default="30s",
        ),
    ] = None,
) -> None:
    """Run the RAG gateway: OpenAI-compatible /v1/chat/completions with retrieval.

    Spans go where OTEL_EXPORTER_OTLP_ENDPOINT says (default the collector on :4318); API
    keys come from SPANBUDGET_API_KEYS (comma-separated; none set means auth is off).

    Example:

        spanbudget serve --listen 127.0.0.1:8080 --llm-base-url http://127.0.0.1:8000/v1
    """
    exit_unless_installed("serve")
    from spanbudget.common.serving import serve as serve_app

    from .tokens import load_tokenizer
    from .tracers import GATEWAY_SERVICE_NAME, build_tracer_provider
    from .wiring import build_embedder, build_gateway, build_store

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings = _settings(
        listen=listen,
        llm_base_url=llm_base_url,
        data_dir=data_dir,
        faults=faults or None,
        header_timeout_seconds=_seconds("--header-timeout", header_timeout),
        body_timeout_seconds=_seconds("--body-timeout", body_timeout),
    )
    provider = build_tracer_provider(GATEWAY_SERVICE_NAME)
    with contextlib.ExitStack() as cleanup:  # undone in reverse: store, model, spans
        cleanup.callback(provider.shutdown)
        embedder, stop_embedder = build_embedder(settings)
        cleanup.callback(stop_embedder)
        store = build_store(settings, embedder.dimension)
        cleanup.callback(store.close)
        app = build_gateway(
            settings,
            provider,
            embedder=embedder,
            store=store,
            counter=load_tokenizer(settings.tokenizer),
        )
        logging.getLogger("service.cli").info(
            "gateway on http://%s (LLM %s, collection %s, faults %s)",
            settings.listen,
            settings.llm_base_url,
            settings.collection,
            "on" if settings.faults else "off",
        )
        # No access log: a line per request is CPU the request path pays for.
        started = serve_app(
            app, settings.listen, log_level="info", header_timeout=settings.header_timeout_seconds
        )
    if not started:  # uvicorn said why (the port taken, say)
        raise typer.Exit(1)


def ingest(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Files or folders (.md .txt .rst .py).")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where the Qdrant Edge shard lives.")
    ] = None,
) -> None:
    """Chunk, embed and index documents; with no PATH, the Python docs that ship with Python.

    Re-running is idempotent: chunk ids depend on the source and position only.

    Example:

        spanbudget ingest docs/ README.md --data-dir ./data
    """
    exit_unless_installed("ingest")
    from rich.progress import Progress

    from .embedding import SentenceTransformerEmbedder
    from .ingest import default_corpus, read_paths
    from .ingest import ingest as run_ingest
    from .wiring import build_store

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings = _settings(data_dir=data_dir)
    for path in paths or []:
        if not path.exists():
            raise typer.BadParameter(f"{path} does not exist", param_hint="PATH")
    documents = read_paths(paths) if paths else default_corpus()
    embedder = SentenceTransformerEmbedder(runtime=settings.embedding_runtime)
    store = build_store(settings, embedder.dimension)
    try:
        with Progress() as progress:
            task = progress.add_task("embedding", total=None)
            report = run_ingest(
                documents,
                embedder,
                store,
                on_total=lambda n: progress.update(task, total=n),
                on_progress=lambda n: progress.advance(task, n),
            )
    finally:
        store.close()
    typer.echo(
        f"ingested {report.chunks} chunks from {report.documents} documents into "
        f"{settings.collection!r} in {report.seconds:.1f} s"
    )
