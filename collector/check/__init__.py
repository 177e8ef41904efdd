"""`spanbudget check`: judge traces read from files or from Jaeger (`paths`, `judge`),
print them (`render`), pick an exit code (`judge.exit_code`)."""

from spanbudget.collector.check.judge import CheckResult, FailOn, evaluate_spans, exit_code
from spanbudget.collector.check.paths import expand_paths
from spanbudget.collector.check.render import render_json, render_table

__all__ = [
    "CheckResult",
    "FailOn",
    "evaluate_spans",
    "exit_code",
    "expand_paths",
    "render_json",
    "render_table",
]
