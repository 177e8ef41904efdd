"""Types of the compiled fast path (`_judge.pyx`); see its docstring."""

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

from ..budget.model import Budget, Selector
from ..budget.recognize import Instrumentation
from ..spans import Span
from .evaluate import Judged
from .llm_calls import LlmRequest, Reading, Scan
from .stage_table import StageTable

_T = TypeVar("_T")

class _Handback: ...

HANDBACK: _Handback

_Mark = tuple[str | None, frozenset[str], Selector | None, tuple[Selector, ...], Selector | None]

class CompiledJudge:
    def __init__(
        self,
        budget: Budget,
        table: StageTable,
        marks: tuple[_Mark, ...],
        sources: list[tuple[str, str, bool]],
        walks: Reading,
        judged: type[Judged],
    ) -> None: ...
    def judge(self, spans: Sequence[Span], evaluated_at: datetime) -> Judged | _Handback | None: ...
    def judge_reading(
        self, spans: Sequence[Span], evaluated_at: datetime
    ) -> tuple[Judged | _Handback | None, LlmRequest | None]: ...
    def read(self, spans: Sequence[Span], first_token_span: str | None) -> LlmRequest: ...
    def settle(
        self,
        judged: Judged,
        request: LlmRequest,
        spans: Sequence[Span],
        instrumentation: str | None,
    ) -> Judged | None: ...

def evolve(obj: _T, **changes: object) -> _T:
    """`dataclasses.replace(obj, **changes)` for judging's frozen slotted dataclasses."""

def scan(spans: Sequence[Span], keys: frozenset[str], events: frozenset[str]) -> Scan:
    """`llm_calls.scan`, compiled."""

def calls_below(call: Span, ids: set[str], children: Mapping[str, list[Span]]) -> list[Span]:
    """`llm_calls.calls_below`, compiled."""

def recognize(spans: Sequence[Span]) -> Instrumentation | None:
    """`budget.recognize.recognize`, compiled."""

def call_attributes(call: Span, below: Iterable[Span]) -> dict[str, str | int]:
    """`llm_calls.call_attributes`, compiled."""
