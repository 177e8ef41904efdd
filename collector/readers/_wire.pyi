"""Types of the compiled OTLP wire reader (`_wire.pyx`); see its docstring."""

from collections.abc import Callable
from typing import Any, TypeVar

from ..spans import Span
from .span_records import AttributeKeys, SpanRecords

_T = TypeVar("_T")

def read(data: bytes, source: str, keys: AttributeKeys, seed: int = 0) -> tuple[Any, ...]:
    """`SpanRecords`' fields, in order, for `data` (raises `TraceReadError`); `seed`
    keys the string hash."""

def spans(records: SpanRecords, max_span_bytes: int = -1) -> tuple[list[Span], dict[str, int]]:
    """`records`' spans, leaving out (and counting by trace id) those whose encoding is
    over `max_span_bytes` when it is 0 or more."""

def wrap_each(cls: Callable[[Any], _T], items: list[Any]) -> list[_T]:
    """`[cls(item) for item in items]`, untracked (`span_records.untracked_each`)."""

def span_rows(spans: list[Span]) -> list[list[Any]] | None:
    """The span store's rows of one trace's spans (`span_store.span_rows`); None where one
    is not a `Span` itself."""
