"""A small app traced by another project's instrumentation, run inside that package's venv.

    python instrumented_app.py LIBRARY --engine URL --otlp URL --out FILE

It exports its spans over OTLP/HTTP to `--otlp`, sends three chat requests to the engine
emulator at `--engine` (two streamed, one not), each inside an app span of its own that
first sleeps 3 ms and, where the library traces a vector store, queries an in-memory
Qdrant; and it writes when it sent each request and saw its first chunk to `--out`.
Any connection or name lookup beyond 127.0.0.1 is refused and recorded: it runs offline.
This file imports nothing from spanbudget: it runs where spanbudget is not installed.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

LIBRARIES = ("openlit", "openllmetry", "openinference")
PACKAGES = {
    "openlit": ("openlit",),
    "openllmetry": ("opentelemetry-instrumentation-openai", "opentelemetry-instrumentation-qdrant"),
    "openinference": ("openinference-instrumentation-openai",),
}
APP_SLEEP_S = 0.003
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name three primes."},
]

network_attempts: list[str] = []
_connect = socket.socket.connect
_getaddrinfo = socket.getaddrinfo


def _local(host: object) -> bool:
    text = host.decode() if isinstance(host, bytes) else str(host)
    return text in ("localhost", "::1") or text.startswith("127.")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if isinstance(address, tuple) and not _local(address[0]):
        network_attempts.append(f"connect {address!r}")
        raise OSError(f"offline: connection to {address!r} refused")
    _connect(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None and not _local(host):
        network_attempts.append(f"getaddrinfo {host!r}")
        raise socket.gaierror(f"offline: no lookup of {host!r}")
    return _getaddrinfo(host, *args, **kwargs)


def instrument(library: str, provider: Any) -> None:
    if library == "openlit":
        import openlit

        pricing = Path(tempfile.mkdtemp()) / "pricing.json"
        pricing.write_text("{}")  # a local pricing file: no fetch from the network
        openlit.init(
            application_name="app-openlit",
            environment="test",
            pricing_json=str(pricing),
            disable_metrics=True,
            disable_events=True,
        )
    elif library == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
        from opentelemetry.instrumentation.qdrant import QdrantInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
        QdrantInstrumentor().instrument(tracer_provider=provider)
    else:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)


def vector_store(library: str) -> Callable[[], object] | None:
    """A query on an in-memory Qdrant, for the libraries that trace one."""
    if library not in ("openlit", "openllmetry"):
        return None
    from qdrant_client import QdrantClient, models

    client = QdrantClient(":memory:")
    params = models.VectorParams(size=4, distance=models.Distance.COSINE)
    client.create_collection(collection_name="docs", vectors_config=params)
    points = [models.PointStruct(id=i, vector=[1.0, i, i * i, 1.0 / (i + 1)]) for i in range(8)]
    client.upsert(collection_name="docs", points=points)
    return lambda: client.query_points(collection_name="docs", query=[1.0, 2.0, 3.0, 4.0], limit=3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("library", choices=LIBRARIES)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--otlp", required=True)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    socket.socket.connect = _guarded_connect
    socket.getaddrinfo = _guarded_getaddrinfo

    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": f"app-{args.library}"}))
    exporter = OTLPSpanExporter(endpoint=f"{args.otlp}/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # this script is the process's entry point
    instrument(args.library, provider)
    retrieve = vector_store(args.library)

    import openai

    client = openai.OpenAI(base_url=f"{args.engine}/v1", api_key="sk-local", max_retries=0)
    model = client.models.list().data[0].id
    tracer = provider.get_tracer("instrumented-app")
    requests = []
    for stream in (True, True, False):
        with tracer.start_as_current_span("handle question") as root:
            time.sleep(APP_SLEEP_S)
            if retrieve is not None:
                retrieve()
            sent = time.time_ns()
            first = None
            if stream:
                chunks = client.chat.completions.create(
                    model=model,
                    messages=MESSAGES,
                    stream=True,
                    max_tokens=8,
                    stream_options={"include_usage": True},
                )
                for _ in chunks:
                    first = first or time.time_ns()
            else:
                client.chat.completions.create(
                    model=model,
                    messages=MESSAGES,
                    max_tokens=8,
                )
            trace_id = format(root.get_span_context().trace_id, "032x")
        requests.append(
            {"trace_id": trace_id, "stream": stream, "sent_ns": sent, "first_ns": first}
        )
    provider.shutdown()
    versions = {name: version(name) for name in (*PACKAGES[args.library], "openai")}
    report = {"requests": requests, "network_attempts": network_attempts, "versions": versions}
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
