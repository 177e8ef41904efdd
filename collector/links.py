"""What other parts use of the collector's web addresses: links to one trace, in its web UI
and in Jaeger's (empty without a base), and how many verdicts one API listing serves."""

from __future__ import annotations

__all__ = ["MAX_LIST", "jaeger_trace_url", "ui_trace_url"]

MAX_LIST = 1000  # the most verdicts `GET /api/verdicts` serves at once; page on with `before`


def ui_trace_url(ui_base: str, trace_id: str) -> str:
    """The trace page of the collector's web UI (`/traces/<trace id>`).

    Links written before it existed (`/#<trace id>`) still open it: the overview forwards them.
    """
    return f"{ui_base.rstrip('/')}/traces/{trace_id}" if ui_base else ""


def jaeger_trace_url(jaeger_base: str, trace_id: str) -> str:
    """Jaeger UI's trace page (`/trace/<trace id>`)."""
    return f"{jaeger_base.rstrip('/')}/trace/{trace_id}" if jaeger_base else ""
