"""The collector's web UI: server-rendered pages and SVG charts over the verdict store."""

from .routes import BudgetNames, ui_router
from .trace_spans import SpanSource

__all__ = ["BudgetNames", "SpanSource", "ui_router"]
