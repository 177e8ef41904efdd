"""A budget's stage selectors compiled for the evaluator (DESIGN §5 rule 4).

Spans of one service repeat the same few shapes (name, kind, service, root-ness), so each
shape is resolved against the selectors once: to a stage when the shape alone decides it,
else to the few attribute checks still in play. Both evaluator paths read it: the tree
through `stage`, the compiled one through `memo`, `decision` and `phases`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..budget.model import Selector, attr_text
from ..spans import AttrValue, SpanKind

__all__ = ["PHASES", "Decision", "StageTable", "resolve"]

PHASES = ("vllm.frontend", "vllm.queue", "vllm.prefill", "vllm.decode")
_INTERNAL = SpanKind.INTERNAL
_NO_ATTRIBUTES: Mapping[str, AttrValue] = {}
_MEMO_LIMIT = 4096

# A shape's decision: a stage name ("" for none) when the shape alone decides it, else the
# selectors still in play, in file order: (stage, ((attribute, accepted texts), ...)).
_Checks = tuple[tuple[str, frozenset[str]], ...]
Decision = str | tuple[tuple[str, _Checks], ...]


class StageTable:
    """The compiled selectors (see the module's docstring), with bounded memos of the
    decision per span shape and of vLLM's phase stages per service."""

    __slots__ = ("_flat", "_phases", "memo")

    def __init__(self, flat: Sequence[tuple[str, Selector]]) -> None:
        self._flat = tuple(flat)
        self.memo: dict[tuple[str, SpanKind, str, bool], Decision] = {}
        self._phases: dict[str, tuple[str, ...]] = {}

    def phases(self, service: str) -> tuple[str, ...]:
        """The stages ("" for none) of vLLM's phase nodes (internal, no attributes) of
        `service`, in `PHASES` order."""
        stages = self._phases.get(service)
        if stages is None:
            if len(self._phases) >= _MEMO_LIMIT:
                self._phases.clear()
            stages = self._phases[service] = tuple(
                self.stage(name, _INTERNAL, service, _NO_ATTRIBUTES, False) for name in PHASES
            )
        return stages

    def stage(
        self,
        name: str,
        kind: SpanKind,
        service: str,
        attributes: Mapping[str, AttrValue],
        is_root: bool,
    ) -> str:
        """The first stage (file order) with a matching selector, or ""."""
        decision = self.decision(name, kind, service, is_root)
        if decision.__class__ is str:
            return decision
        return resolve(decision, attributes)  # type: ignore[arg-type]

    def decision(self, name: str, kind: SpanKind, service: str, is_root: bool) -> Decision:
        """What the shape alone decides (see `Decision`)."""
        key = (name, kind, service, is_root)
        decision = self.memo.get(key)
        if decision is None:
            decision = self._compile(key)
        return decision

    def _compile(self, key: tuple[str, SpanKind, str, bool]) -> Decision:
        name, kind, service, is_root = key
        left: list[tuple[str, _Checks]] = []
        for stage, sel in self._flat:
            if sel.matches_shape(name, kind, service, is_root):
                left.append((stage, tuple(sel.attributes.items())))
                if not sel.attributes:
                    break  # it always matches: no later selector is ever reached
        decision: Decision
        if not left:
            decision = ""
        elif not left[0][1]:
            decision = left[0][0]
        else:
            decision = tuple(left)
        if len(self.memo) >= _MEMO_LIMIT:
            self.memo.clear()
        self.memo[key] = decision
        return decision


def resolve(left: tuple[tuple[str, _Checks], ...], attributes: Mapping[str, AttrValue]) -> str:
    """The stage of a span whose shape left `left` in play, by its attributes ("" for none)."""
    get = attributes.get
    for stage, checks in left:
        for key, accepted in checks:
            value = get(key)
            if value is None:
                break
            if value.__class__ is not str:
                value = attr_text(value)
            if value not in accepted:
                break
        else:
            return stage
    return ""
