"""Attribute names only the collector reads or writes: the load tester's `loadtest.*`, and
`budget.*`, spanbudget's annotations (DESIGN §7); those the reference path writes too are
in `spanbudget.semconv`, which also names the first-token marks and vLLM phases below.
"""

from __future__ import annotations

# First-token marks (DESIGN §5 rule 2), in seconds: the budget's default marks.
TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
VLLM_LATENCY_TTFT = "gen_ai.latency.time_to_first_token"

# vLLM's request span and the phases it reports, in seconds.
VLLM_REQUEST_SPAN = "llm_request"
VLLM_LATENCY_QUEUE = "gen_ai.latency.time_in_queue"
VLLM_LATENCY_PREFILL = "gen_ai.latency.time_in_model_prefill"

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
