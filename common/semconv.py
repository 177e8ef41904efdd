"""Attribute and span names that both sides use: the reference path writes them, the
collector (its evaluator, its load tester) reads or writes them too (DESIGN §3).

A leaf: it imports nothing of spanbudget's, so `spanbudget.service` and
`spanbudget.collector` may both import it and still never import each other. GenAI
names follow the OpenTelemetry GenAI semantic conventions; `llm_request` and its
attributes are vLLM's own (vllm/tracing/utils.py `SpanAttributes`, as its V1 engine
sets them), older GenAI names among them.
"""

from __future__ import annotations

from typing import Final

# Resource and HTTP semantic conventions.
SERVICE_NAME: Final = "service.name"
SERVICE_INSTANCE_ID: Final = "service.instance.id"
# The host a span ran on, hence its clock (DESIGN §5 rule 3): host.name, else host.id.
HOST_NAME: Final = "host.name"
HOST_ID: Final = "host.id"
HTTP_RESPONSE_STATUS_CODE: Final = "http.response.status_code"

# GenAI semantic conventions.
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
# Seconds from the span's start to the first chunk: a first-token mark (DESIGN §5 rule 2).
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
OPERATION_CHAT: Final = "chat"

# GenAI semantic conventions the reference path writes and no reader needs yet.
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_DATA_SOURCE_ID: Final = "gen_ai.data_source.id"
OPERATION_EMBEDDINGS: Final = "embeddings"
OPERATION_RETRIEVAL: Final = "retrieval"

# Database semantic conventions.
DB_SYSTEM_NAME: Final = "db.system.name"
DB_OPERATION_NAME: Final = "db.operation.name"
DB_COLLECTION_NAME: Final = "db.collection.name"
DB_SYSTEM_QDRANT: Final = "qdrant"

# General and HTTP semantic conventions.
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"
HTTP_REQUEST_BODY_SIZE: Final = "http.request.body.size"

# vLLM's request span, emitted when the request finishes, with its phases in seconds.
VLLM_REQUEST_SPAN: Final = "llm_request"
# vLLM's per-phase spans under `llm_request` (vllm-project/vllm PR #44402): where a request
# has them, they are its phases, and none are read from its latency attributes.
VLLM_PHASE_SPANS: Final = ("vllm_queue", "vllm_prefill", "vllm_async_kv_transfer", "vllm_decode")
GEN_AI_LATENCY_TIME_IN_QUEUE: Final = "gen_ai.latency.time_in_queue"
GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN: Final = "gen_ai.latency.time_to_first_token"
GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL: Final = "gen_ai.latency.time_in_model_prefill"
GEN_AI_LATENCY_TIME_IN_MODEL_DECODE: Final = "gen_ai.latency.time_in_model_decode"
GEN_AI_LATENCY_TIME_IN_MODEL_INFERENCE: Final = "gen_ai.latency.time_in_model_inference"
GEN_AI_LATENCY_E2E: Final = "gen_ai.latency.e2e"
GEN_AI_USAGE_PROMPT_TOKENS: Final = "gen_ai.usage.prompt_tokens"
GEN_AI_USAGE_COMPLETION_TOKENS: Final = "gen_ai.usage.completion_tokens"
GEN_AI_REQUEST_ID: Final = "gen_ai.request.id"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_N: Final = "gen_ai.request.n"
