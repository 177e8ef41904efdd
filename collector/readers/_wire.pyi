"""Types of the compiled OTLP wire reader (`_wire.pyx`); see its docstring."""

from typing import Any

from ..spans import Span
from .span_records import AttributeKeys, SpanRecords

def read(data: bytes, source: str, keys: AttributeKeys, seed: int = 0) -> tuple[Any, ...]:
    """`SpanRecords`' fields, in order, for `data` (raises `TraceReadError`); `seed`
    keys the string hash."""

def spans(records: SpanRecords, max_span_bytes: int = -1) -> tuple[list[Span], dict[str, int]]:
    """`records`' spans, leaving out (and counting by trace id) those whose encoding is
    over `max_span_bytes` when it is 0 or more."""

def untrack(objects: list[Any]) -> None:
    """Take `objects` out of the cycle collector's sight (`span_records.untracked`)."""
