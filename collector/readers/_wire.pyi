"""Types of the compiled OTLP wire reader (`_wire.pyx`); see its docstring."""

from typing import Any

from .span_records import AttributeKeys

def read(data: bytes, source: str, keys: AttributeKeys, seed: int = 0) -> tuple[Any, ...]:
    """`SpanRecords`' fields, in order, for `data` (raises `TraceReadError`); `seed`
    keys the string hash."""
