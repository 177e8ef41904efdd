"""The reference path's own span and attribute names (DESIGN §3), for what no semantic
convention covers: the gateway's checks, the retrieval's query parameters, the prompt's
documents, the embedding model's queue. The conventions' own names (GenAI, database,
HTTP) are in `spanbudget.common.semconv`, shared with the collector.
"""

from __future__ import annotations

from typing import Final

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
