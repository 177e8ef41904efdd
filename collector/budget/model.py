"""The budget model: stages with targets and limits, the selectors that claim spans, and the
first-token marks that say where the time to first token ends.

Pure data. `budget_file.load_budget` builds it from `budget.yaml`; the evaluator reads it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from spanbudget.common.semconv import (
    GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN,
    GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
)

from ..errors import CollectorError
from ..spans import AttrValue, SpanKind

__all__ = [
    "DEFAULT_FIRST_TOKEN",
    "Budget",
    "FirstTokenMark",
    "GlobError",
    "NonStreamed",
    "Selector",
    "Stage",
    "WhenAbsent",
    "attr_text",
    "compile_glob",
]


class WhenAbsent(enum.Enum):
    """What a stage with no matching span means."""

    ZERO = "zero"  # the stage did not happen: 0 ms
    UNMEASURED = "unmeasured"  # it happened out of sight: no ms, total limit reduced


class GlobError(CollectorError, ValueError):
    """A `name` or `service` pattern that is not a valid glob."""


def compile_glob(pattern: str) -> re.Pattern[str]:
    """Compile a shell-style glob (`*`, `?`, `[abc]`, `[!abc]`) to an anchored regex.

    Unlike `fnmatch`, an unclosed `[` or an empty pattern is an error rather than a literal,
    so a typo in `budget.yaml` is reported instead of silently matching nothing.
    """
    if not pattern:
        raise GlobError("empty pattern")
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end == -1:
                raise GlobError(f"unclosed '[' at position {i} in {pattern!r}")
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            if body in ("", "^"):
                raise GlobError(f"empty character class at position {i} in {pattern!r}")
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end
        elif char == "]":
            raise GlobError(f"unmatched ']' at position {i} in {pattern!r}")
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def attr_text(value: AttrValue | object) -> str:
    """Compare attribute values as text, so `500` in YAML matches an int or a string 500."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class Selector:
    """Fields are ANDed; a field left as None matches anything."""

    name: str | None = None
    kind: SpanKind | None = None
    service: str | None = None
    attributes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    root: bool | None = None
    _name_re: re.Pattern[str] | None = field(default=None, repr=False, compare=False)
    _service_re: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(
        cls,
        *,
        name: str | None = None,
        kind: SpanKind | None = None,
        service: str | None = None,
        attributes: Mapping[str, list[AttrValue] | AttrValue] | None = None,
        root: bool | None = None,
    ) -> Selector:
        """Build a selector, compiling its globs (raises `GlobError`)."""
        accepted: dict[str, frozenset[str]] = {}
        for key, values in (attributes or {}).items():
            items = values if isinstance(values, list) else [values]
            accepted[key] = frozenset(attr_text(v) for v in items)
        return cls(
            name=name,
            kind=kind,
            service=service,
            attributes=accepted,
            root=root,
            _name_re=compile_glob(name) if name is not None else None,
            _service_re=compile_glob(service) if service is not None else None,
        )

    def matches_shape(self, name: str, kind: SpanKind, service: str, is_root: bool) -> bool:
        """The attribute-free part of the match, which many spans share."""
        if self.kind is not None and kind is not self.kind:
            return False
        if self.root is not None and is_root is not self.root:
            return False
        if self._name_re is not None and self._name_re.match(name) is None:
            return False
        return self._service_re is None or self._service_re.match(service) is not None

    def matches_attributes(self, attributes: Mapping[str, AttrValue]) -> bool:
        for key, accepted in self.attributes.items():
            value = attributes.get(key)
            if value is None or attr_text(value) not in accepted:
                return False
        return True

    def describe(self) -> str:
        """The selector as budget.yaml writes it, e.g. `{name: "* http send", kind: internal}`."""
        parts = []
        if self.name is not None:
            parts.append(f"name: {self.name!r}")
        if self.kind is not None:
            parts.append(f"kind: {self.kind.value}")
        if self.service is not None:
            parts.append(f"service: {self.service!r}")
        for key, accepted in sorted(self.attributes.items()):
            values = sorted(accepted)
            parts.append(f"{key}: {values[0] if len(values) == 1 else values}")
        if self.root is not None:
            parts.append(f"root: {str(self.root).lower()}")
        return "{" + ", ".join(parts) + "}"


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    target_ms: float
    limit_ms: float
    selectors: tuple[Selector, ...]
    when_absent: WhenAbsent = WhenAbsent.ZERO


@dataclass(frozen=True, slots=True)
class FirstTokenMark:
    """Where one instrumentation records the first token on a span (DESIGN §5 rule 2).

    One of three: an `attribute` holding seconds after an anchor; the first of the
    `events` named (its timestamp is the instant); or `first_child`, the start of the
    earliest child span that matches it where two or more match (a server's first
    response-body send of a stream: ASGI's `http send` spans, where the first chunk left
    the server; an answer sent whole is a single send and marks nothing). The anchor is the span's
    start, or with `anchor`, the end of the latest-starting child span that matches it
    (OpenLIT counts from when the response headers arrived, which is where its HTTP child
    span ends). `match` limits the spans that may carry the mark (empty: any span).
    `estimate`: the mark is known to be off by an unbounded amount (OpenLIT's value counted
    from the span's start, without the HTTP child), and verdicts say so.
    """

    attribute: str | None = None
    events: frozenset[str] = frozenset()
    anchor: Selector | None = None
    match: tuple[Selector, ...] = ()
    first_child: Selector | None = None
    estimate: bool = False

    @property
    def source(self) -> str:
        """What kind of mark it is, as a verdict's `first_token.source` names it: `event`,
        `attribute` (counted from the span's start), `anchored attribute` (from a child's
        end), `first child` (a child span's start), `vllm` (vLLM's own figure)."""
        if self.first_child is not None:
            return "first child"
        if self.attribute is None:
            return "event"
        if self.attribute == GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN:
            return "vllm"
        return "attribute" if self.anchor is None else "anchored attribute"

    def describe(self) -> str:
        """One line for people: what the mark reads."""
        if self.first_child is not None:
            child = self.first_child.describe()
            return f"the start of the first of several child spans like {child}"
        if self.attribute is None:
            return "event " + " or ".join(sorted(self.events))
        after = "the span's start" if self.anchor is None else "the end of a child span"
        return f"attribute {self.attribute} (seconds after {after})"


# Without a `first_token` list, a budget reads these (DESIGN §5 rule 2).
DEFAULT_FIRST_TOKEN = (
    FirstTokenMark(attribute=GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK),
    FirstTokenMark(attribute=GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN),
)


class NonStreamed(enum.Enum):
    """What a budget does with a trace whose LLM calls were not streamed (the response came
    whole): leave it out of the TTFT SLO as `not_streamed`, its response time reported
    (`skip`, the default), or judge it with the whole response as its first token."""

    SKIP = "skip"
    JUDGE = "judge"


@dataclass(frozen=True, slots=True)
class Budget:
    """An allocation table: a total for time to first token, and stages in claim order.

    `first_token` lists the marks in the order they are tried on each span; `preset` names
    the packaged preset the table extends, if any; `non_streamed` says what becomes of a
    request that was not streamed.
    """

    name: str
    total_target_ms: float
    total_limit_ms: float
    stages: tuple[Stage, ...]
    slo_objective: float = 0.95
    description: str = ""
    version: int = 1
    first_token: tuple[FirstTokenMark, ...] = DEFAULT_FIRST_TOKEN
    preset: str | None = None
    non_streamed: NonStreamed = NonStreamed.SKIP

    def stage_names(self) -> list[str]:
        return [stage.name for stage in self.stages]

    def stage(self, name: str) -> Stage:
        """The stage called `name` (KeyError when there is none)."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)
