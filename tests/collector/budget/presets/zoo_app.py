"""The zoo's app: the real `openai` client (or a LangChain chain) traced by one
instrumentation library, run inside that library's venv against the zoo's server.

    python zoo_app.py VARIANT --base URL --otlp URL --out FILE [--upstream]

VARIANT: openllmetry, openinference, openlit, openlit-nohttp (OpenLIT with its httpx and
requests instrumentors off), openai-v2 (OpenTelemetry's own, with util-genai),
lc-openinference, lc-openllmetry (a LangChain chain under that library's LangChain
instrumentation). It exports its spans over OTLP/HTTP to --otlp, sends the request shapes
(zoo_requests.py) and writes what the client saw of each to --out. With --upstream, two more
streams go through the server to the engine emulator: one passing the trace context on
(vLLM's span in the trace), one not (vLLM's span a trace of its own). It imports nothing
from spanbudget: it runs where spanbudget is not installed.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import traceback
from pathlib import Path
from typing import Any

import zoo_requests
from zoo_requests import Recorder, Started

VARIANTS = ("openllmetry", "openinference", "openlit", "openlit-nohttp", "openai-v2",
            "lc-openinference", "lc-openllmetry")  # fmt: skip


def instrument(variant: str, otlp: str, started: Started) -> Any:
    """Trace as each library's docs say; the SDK TracerProvider in use."""
    from opentelemetry import trace

    if variant.startswith("openlit"):
        import openlit

        pricing = Path(tempfile.mkdtemp()) / "pricing.json"
        pricing.write_text("{}")  # a local pricing file: no fetch from GitHub
        disabled = ["httpx", "requests"] if variant == "openlit-nohttp" else None
        openlit.init(
            application_name=f"zoo-app-{variant}",
            environment="zoo",
            otlp_endpoint=otlp,
            pricing_json=str(pricing),
            disable_metrics=True,
            disable_events=True,  # else it posts its events to /v1/logs
            disabled_instrumentors=disabled,
        )
        provider = trace.get_tracer_provider()
        provider.add_span_processor(started)  # type: ignore[attr-defined]
        return provider
    if variant == "openai-v2":
        # openai-v2 2.4b0 does `from httpx import URL`; openai 3 brings httpx2 alone, which
        # can stand in for httpx (its own migration switch), before anything imports httpx.
        import httpx2

        httpx2.alias_httpx()

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": f"zoo-app-{variant}"}))
    provider.add_span_processor(started)
    exporter = OTLPSpanExporter(endpoint=f"{otlp}/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    trace.set_tracer_provider(provider)  # this script is the process's entry point
    if variant == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
        from opentelemetry.instrumentation.qdrant import QdrantInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
        QdrantInstrumentor().instrument(tracer_provider=provider)
    elif variant == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OIOpenAI

        OIOpenAI().instrument(tracer_provider=provider)
    elif variant == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as V2OpenAI

        V2OpenAI().instrument(tracer_provider=provider)
    elif variant == "lc-openinference":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)
    else:
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor().instrument(tracer_provider=provider)
    return provider


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("--base", required=True)
    parser.add_argument("--otlp", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--upstream", action="store_true")
    args = parser.parse_args()
    zoo_requests.stay_offline()
    started = Started()
    provider = instrument(args.variant, args.otlp, started)
    recorder = Recorder(started)
    errors = []
    zoo_requests.wait_for(int(args.base.rsplit(":", 1)[1]))  # it started as this imported
    try:
        if args.variant.startswith("lc-"):
            zoo_requests.run_langchain(args.base, recorder)
        else:
            zoo_requests.run_openai(args.variant, args.base, recorder, args.upstream)
    except Exception:  # keep what was recorded; the test fails on it
        errors.append(traceback.format_exc())
    provider.force_flush()
    provider.shutdown()
    report = {
        "variant": args.variant,
        "versions": zoo_requests.versions(),
        "network_attempts": zoo_requests.network_attempts,
        "errors": errors,
        "requests": recorder.requests,
    }
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
