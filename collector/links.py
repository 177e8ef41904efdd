"""What other parts use of the collector's web addresses: links to one trace, in its web UI
and in Jaeger's, and to a load-test run's page and traces (each empty without a base),
and how many verdicts one API listing serves."""

from __future__ import annotations

from urllib.parse import quote

__all__ = ["MAX_LIST", "jaeger_trace_url", "ui_run_url", "ui_trace_url", "ui_traces_url"]

MAX_LIST = 1000  # the most verdicts `GET /api/verdicts` serves at once; page on with `before`


def ui_trace_url(ui_base: str, trace_id: str) -> str:
    """The trace page of the collector's web UI (`/traces/<trace id>`).

    Links written before it existed (`/#<trace id>`) still open it: the overview forwards them.
    """
    return f"{ui_base.rstrip('/')}/traces/{trace_id}" if ui_base else ""


def jaeger_trace_url(jaeger_base: str, trace_id: str) -> str:
    """Jaeger UI's trace page (`/trace/<trace id>`)."""
    return f"{jaeger_base.rstrip('/')}/trace/{trace_id}" if jaeger_base else ""


def ui_run_url(ui_base: str, run_id: str) -> str:
    """The web UI's page of a load-test run (`/runs/<run id>`; the id may hold `/`)."""
    return f"{ui_base.rstrip('/')}/runs/{quote(run_id, safe='/')}" if ui_base else ""


def ui_traces_url(ui_base: str, run_id: str, status: str = "") -> str:
    """The web UI's trace list of a run, of one verdict status when given."""
    if not ui_base:
        return ""
    query = f"run_id={quote(run_id, safe='')}" + (f"&status={quote(status)}" if status else "")
    return f"{ui_base.rstrip('/')}/traces?{query}"
