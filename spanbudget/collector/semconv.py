"""Attribute and span names the collector reads or writes, in one place.

GenAI names follow the OpenTelemetry GenAI semantic conventions; the `gen_ai.latency.*`
names are vLLM's own; `budget.*` are spanbudget's annotations (DESIGN §7).
"""

from __future__ import annotations

# First-token marks (DESIGN §5 rule 2), in seconds: the budget's default marks.
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
VLLM_LATENCY_TTFT = "gen_ai.latency.time_to_first_token"

# vLLM's request span and the phases it reports, in seconds.
VLLM_REQUEST_SPAN = "llm_request"
VLLM_LATENCY_QUEUE = "gen_ai.latency.time_in_queue"
VLLM_LATENCY_PREFILL = "gen_ai.latency.time_in_model_prefill"

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
SERVICE_NAME = "service.name"

# Attributes copied from the trace into the verdict's `attributes`.
LOADTEST_PREFIX = "loadtest."
LOADTEST_RUN_ID = "loadtest.run_id"
LOADTEST_REQUEST_INDEX = "loadtest.request_index"
LOADTEST_PHASE = "loadtest.phase"

# Annotations added to spans on export.
BUDGET_NAME = "budget.name"
BUDGET_STATUS = "budget.status"
BUDGET_TTFT_MS = "budget.ttft_ms"
BUDGET_BLAME = "budget.blame"
BUDGET_OVERRUN_MS = "budget.overrun_ms"
BUDGET_STAGE = "budget.stage"
