"""`spanbudget check`: judge traces read from files, stdin or Jaeger (`paths`, `judge`),
print them (`render`, `junit`), pick an exit code (`judge.exit_code`)."""

from .judge import (
    CheckResult,
    FailOn,
    evaluate_spans,
    exit_code,
    fails,
    why_empty,
)
from .junit import render_junit
from .paths import STDIN, Inputs, expand_paths, read_inputs
from .render import render_json, render_table

__all__ = [
    "STDIN",
    "CheckResult",
    "FailOn",
    "Inputs",
    "evaluate_spans",
    "exit_code",
    "expand_paths",
    "fails",
    "read_inputs",
    "render_json",
    "render_junit",
    "render_table",
    "why_empty",
]
