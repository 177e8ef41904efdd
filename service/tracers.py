"""Who the reference path's processes say they are in their spans: the gateway as
`rag-gateway`, the engine emulator as vLLM does.

Building the tracer provider (the `OTEL_*` variables, the OTLP endpoint, the batch
processor) is `spanbudget.common.tracing`'s, shared with the collector side.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from spanbudget.common.tracing import build_tracer_provider

__all__ = [
    "ENGINE_SERVICE_NAME",
    "GATEWAY_SERVICE_NAME",
    "build_tracer_provider",
    "engine_tracer_provider",
]

GATEWAY_SERVICE_NAME = "rag-gateway"
ENGINE_SERVICE_NAME = "vllm"


def engine_tracer_provider(
    *, processor: SpanProcessor | None = None, env: Mapping[str, str] | None = None
) -> TracerProvider:
    """The engine emulator's provider, with vLLM's own resource attributes, so that its
    spans look like those of a vLLM server."""
    return build_tracer_provider(
        ENGINE_SERVICE_NAME,
        processor=processor,
        env=env,
        resource_attributes={
            "vllm.instrumenting_module_name": "vllm.llm_engine",
            "vllm.process_id": os.getpid(),
        },
    )
