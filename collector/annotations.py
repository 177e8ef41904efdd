"""spanbudget's own attribute names, which only the collector reads or writes: the load
tester's `loadtest.*` and the `budget.*` annotations (DESIGN §7). The conventions' names
(GenAI, vLLM's phases, the first-token marks) are in `spanbudget.common.semconv`.
"""

from __future__ import annotations

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
