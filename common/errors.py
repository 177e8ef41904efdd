"""The root of spanbudget's own exceptions, a leaf both parts import.

`SpanbudgetError` is the one thing to catch for "spanbudget refused or failed"; each part
has its root below it (`spanbudget.collector.errors.CollectorError`,
`spanbudget.service.errors.ServiceError`). Errors that also mean a built-in kind keep it as
a second base (a bad budget file is still a `ValueError`), so callers that caught those
still do.
"""

from __future__ import annotations

__all__ = ["SpanbudgetError"]


class SpanbudgetError(Exception):
    """Anything spanbudget raises on purpose: bad input, a refused request, a failed run."""
