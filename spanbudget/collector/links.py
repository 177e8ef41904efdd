"""Links to one trace: in the budget collector's web UI and in Jaeger's (empty without a base)."""

from __future__ import annotations

__all__ = ["jaeger_trace_url", "ui_trace_url"]


def ui_trace_url(ui_base: str, trace_id: str) -> str:
    """The collector's web UI opens a trace from the fragment (`/#<trace id>`)."""
    return f"{ui_base.rstrip('/')}/#{trace_id}" if ui_base else ""


def jaeger_trace_url(jaeger_base: str, trace_id: str) -> str:
    """Jaeger UI's trace page (`/trace/<trace id>`)."""
    return f"{jaeger_base.rstrip('/')}/trace/{trace_id}" if jaeger_base else ""
