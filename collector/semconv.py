"""Attribute names only the collector reads or writes: the load tester's `loadtest.*`, and
`budget.*`, spanbudget's annotations (DESIGN §7); those the reference path writes too are
in `spanbudget.semconv`, which also names the first-token marks and vLLM's phases.
"""

from __future__ import annotations

from spanbudget.semconv import (
    GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
    GEN_AI_LATENCY_TIME_IN_QUEUE,
    GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN,
)
from spanbudget.semconv import VLLM_PHASE_SPANS as VLLM_PHASE_SPANS
from spanbudget.semconv import VLLM_REQUEST_SPAN as VLLM_REQUEST_SPAN

# The attribution's names for vLLM's phases, in seconds: the leaf's strings.
VLLM_LATENCY_TTFT = GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN
VLLM_LATENCY_QUEUE = GEN_AI_LATENCY_TIME_IN_QUEUE
VLLM_LATENCY_PREFILL = GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL

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
