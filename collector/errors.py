"""The collector's exceptions' root: what measures refused or could not do.

Below it: `readers.TraceReadError` (a trace file or Jaeger answer that cannot be read),
`budget.BudgetError` and `budget.model.GlobError` (a budget file that is not valid),
`budget.UnknownPresetError`, `suggest.NoTracesError`, `live.intake.IntakeError` (an OTLP
request refused, with its HTTP status), and the load tester's `loadtest.run.RunFailed`,
`loadtest.verdicts.CollectorUnavailable` and `loadtest.http1.HTTPError`.
"""

from __future__ import annotations

from spanbudget.common.errors import SpanbudgetError

__all__ = ["CollectorError"]


class CollectorError(SpanbudgetError):
    """Raised by spanbudget.collector on purpose."""
