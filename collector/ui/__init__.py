"""The collector's web UI: server-rendered pages and SVG charts over the verdict store."""

from .routes import ui_router
from .trace_spans import SpanSource

__all__ = ["SpanSource", "ui_router"]
