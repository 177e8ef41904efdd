"""The collector's web UI: server-rendered pages and SVG charts over the verdict store."""

from spanbudget.collector.live.ui.routes import ui_router

__all__ = ["ui_router"]
