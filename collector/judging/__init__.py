"""Judging a trace against a budget (DESIGN §5), pure: spans in, a verdict out.

`evaluate.Evaluator` is the one entry point and the one place that chooses between the
two forms of the attribution: the tree (`attribution`, the reference, what the web UI's
waterfall draws, and the fallback) and the compiled one (`_judge.pyx`, built where a C
compiler is). `stage_table` compiles the budget's selectors, `verdict` is the verdict's
model and `verdict_rules` the rules both forms share (rounding, bands, blame).
"""

# The `evaluate` function stays in its module: re-exported here, it would hide the module
# `judging.evaluate` from `import spanbudget.collector.judging.evaluate`.
from .evaluate import COMPILED, PURE_PYTHON_ENV, Evaluator, Judged
from .verdict import StageResult, Status, Verdict

__all__ = [
    "COMPILED",
    "PURE_PYTHON_ENV",
    "Evaluator",
    "Judged",
    "StageResult",
    "Status",
    "Verdict",
]
