"""The collector's web UI: server-rendered pages and SVG charts over the verdict store."""

from spanbudget.collector.ui.routes import ui_router
from spanbudget.collector.ui.trace_spans import SpanSource

__all__ = ["SpanSource", "ui_router"]
