"""Span and attribute names of DESIGN §3 in one place: GenAI, database and HTTP
semantic-convention names, plus the few attributes of our own."""

from __future__ import annotations

from typing import Final

# GenAI semantic conventions.
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_DATA_SOURCE_ID: Final = "gen_ai.data_source.id"

# vLLM's `llm_request` span (vllm/tracing/utils.py SpanAttributes, as its V1 engine sets
# them): the names it uses, older GenAI ones among them. The collector reads the
# `gen_ai.latency.*` ones (spanbudget/collector/semconv.py) to split prefill into queue and compute.
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

OPERATION_CHAT: Final = "chat"
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

# Our own attributes (no convention covers them).
GATEWAY_MESSAGE_COUNT: Final = "gateway.request.message_count"
AUTH_METHOD: Final = "auth.method"
AUTH_KEY_ID: Final = "auth.key_id"
RATELIMIT_REMAINING: Final = "ratelimit.remaining"
QUERY_TOP_K: Final = "db.query.top_k"
QUERY_HNSW_EF: Final = "db.query.hnsw_ef"
QUERY_HIT_COUNT: Final = "db.response.returned_rows"
PROMPT_TEMPLATE_ID: Final = "prompt.template.id"
PROMPT_DOCUMENTS_KEPT: Final = "prompt.documents.kept"
PROMPT_DOCUMENTS_DROPPED: Final = "prompt.documents.dropped"
PROMPT_CONTEXT_TOKENS: Final = "prompt.context.tokens"
FAULT_DELAY_MS: Final = "spanbudget.fault.delay_ms"
# On `embeddings {model}`: the wait for the model, the batch the query joined, that
# model call's wall and CPU time (wall minus CPU: the call waited for a core), and the wait
# from the model's answer to the request running again on the event loop.
EMBEDDINGS_QUEUE_MS: Final = "embeddings.queue_ms"
EMBEDDINGS_LOOP_WAIT_MS: Final = "embeddings.loop_wait_ms"
EMBEDDINGS_BATCH_SIZE: Final = "embeddings.batch.size"
EMBEDDINGS_COMPUTE_MS: Final = "embeddings.compute_ms"
EMBEDDINGS_COMPUTE_CPU_MS: Final = "embeddings.compute.cpu_ms"

# Span names (formatted with the model or collection where DESIGN §3 says so).
SPAN_VALIDATE: Final = "gateway.validate"
SPAN_AUTH: Final = "auth.verify"
SPAN_PROMPT: Final = "prompt.render"
# Children of `embeddings {model}`: from joining the queue to the start of its model call,
# and from the model's answer to the request running again on the event loop.
SPAN_EMBEDDINGS_QUEUE: Final = "embeddings.queue"
SPAN_EMBEDDINGS_LOOP_WAIT: Final = "embeddings.loop_wait"


def retrieval_span_name(collection: str) -> str:
    return f"retrieval {collection}"


def embeddings_span_name(model: str) -> str:
    return f"embeddings {model}"


def query_span_name(collection: str) -> str:
    return f"query {collection}"


def chat_span_name(model: str) -> str:
    return f"chat {model}"
