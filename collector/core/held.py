"""What the collector holds of one span until its trace is decided: the evaluator's `Span`
and, when the collector forwards, its protobuf original with the resource and scope it
came with, which forwarding sends on (annotated) as it arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..spans import Span

__all__ = ["HeldSpan", "Origin"]


@dataclass(slots=True)
class Origin:
    """The resource and scope of a batch of OTLP spans, shared by every span of the batch."""

    resource: Any  # opentelemetry.proto.resource.v1.Resource
    resource_schema_url: str
    scope: Any  # opentelemetry.proto.common.v1.InstrumentationScope
    scope_schema_url: str


@dataclass(slots=True)
class HeldSpan:
    """One span: `proto` and `origin` are its OTLP original, both None when nothing
    forwards it (or it was made in this process, by `BudgetSpanProcessor`). Forwarding
    annotates `proto` in place once the trace is judged; nothing else reads or changes it."""

    span: Span
    proto: Any = None  # opentelemetry.proto.trace.v1.Span
    origin: Origin | None = None
