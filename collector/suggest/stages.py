"""Stages for `budget suggest` from the span tree's structure, when no preset names them.

In each trace the critical path runs down from the root through spans with a single child
on it to a *hub*, the first span whose time splits among several children (the gateway's
server span, a chain's root, vLLM's request with its phases). The spans down to the hub
each become a stage of their own time; the hub's children on the critical path become a
stage per family, a family being what the span is (its `openinference.span.kind`,
`gen_ai.operation.name` or database system, else the first word of its name) in one
service. A stage claims its spans' subtrees, as any stage does. Pure: spans in, stages out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..budget.model import FirstTokenMark, Selector, WhenAbsent
from ..judging.attribution import Node, assemble, attribute_window
from ..judging.evaluate import first_token_ns
from ..spans import Span, SpanKind

__all__ = ["StageDraft", "stages_from_structure"]

# What a span is, in order of precedence: the first of these attributes it carries.
LABEL_ATTRIBUTES = (
    "openinference.span.kind",
    "gen_ai.operation.name",
    "db.system.name",
    "db.system",
)
_KIND_NAMES = {SpanKind.CLIENT: "client", SpanKind.SERVER: "server"}
_GLOB_SPECIALS = re.compile(r"[*?\[\]]")
_FIRST_WORD = re.compile(r"[ .]")
_NOT_NAME = re.compile(r"[^a-z0-9_]+")


@dataclass(frozen=True, slots=True)
class StageDraft:
    """A proposed stage without numbers: its name, selectors and what absence means."""

    name: str
    selectors: tuple[Selector, ...]
    when_absent: WhenAbsent = WhenAbsent.ZERO


@dataclass
class _Family:
    kind: SpanKind
    service: str
    label: str
    attribute: str | None  # the label's attribute; None: the label is the name's first word
    on_chain: bool  # above or at the hub: a stage of the span's own time
    virtual: bool
    names: set[str] = field(default_factory=set)
    offsets: list[int] = field(default_factory=list)  # start after the root's, ns
    traces: int = 0
    always_root: bool = True


def _label(node: Node) -> tuple[str, str | None]:
    if node.virtual:  # vLLM's phases: vllm.queue -> queue
        return node.name.rpartition(".")[2], None
    for key in LABEL_ATTRIBUTES:
        value = node.attributes.get(key)
        if isinstance(value, str) and value:
            return value, key
    return _FIRST_WORD.split(node.name, maxsplit=1)[0] or node.name, None


def _family_key(node: Node, on_chain: bool) -> tuple[object, ...]:
    label, attribute = _label(node)
    return (on_chain, node.kind, node.service, label, attribute, node.virtual)


def _on_path_children(node: Node) -> list[Node]:
    return sorted((k for k in node.children if k.on_path), key=lambda k: k.start)


def stages_from_structure(
    traces: Sequence[Sequence[Span]], marks: Sequence[FirstTokenMark]
) -> list[StageDraft]:
    """Stages for the traces that have a first token; none when no trace has one."""
    families: dict[tuple[object, ...], _Family] = {}
    judged = 0
    for spans in traces:
        tree = assemble(spans)
        if tree is None:
            continue
        try:
            first_token = first_token_ns(tree, marks, spans)
            if first_token is None:
                continue
            attribute_window(tree, tree.root.start, first_token)
            judged += 1
            chain = [tree.root]
            while len(kids := _on_path_children(chain[-1])) == 1:
                chain.append(kids[0])
            seen: set[tuple[object, ...]] = set()
            members = [(n, True) for n in chain] + [(n, False) for n in kids]
            for node, on_chain in members:
                key = _family_key(node, on_chain)
                family = families.get(key)
                if family is None:
                    label, attribute = _label(node)
                    family = _Family(
                        node.kind, node.service, label, attribute, on_chain, node.virtual
                    )
                    families[key] = family
                family.names.add(node.name)
                family.offsets.append(node.start - tree.root.start)
                family.always_root = family.always_root and node is tree.root
                if key not in seen:
                    seen.add(key)
                    family.traces += 1
        finally:
            tree.release()
    ordered = sorted(
        families.values(), key=lambda f: (not f.on_chain, sorted(f.offsets)[len(f.offsets) // 2])
    )
    drafts: list[StageDraft] = []
    for family in ordered:
        name = _stage_name(family, {d.name for d in drafts})
        when_absent = WhenAbsent.ZERO
        if family.on_chain and family.always_root and family.traces < judged:
            when_absent = WhenAbsent.UNMEASURED  # a caller that some traces leave out
        drafts.append(StageDraft(name, (_selector(family),), when_absent))
    return drafts


def _name_glob(names: set[str]) -> str:
    """The one name, or the names' common prefix and `*`; glob characters become `?`."""
    if len(names) == 1:
        return _GLOB_SPECIALS.sub("?", next(iter(names)))
    first, last = min(names), max(names)
    size = next((i for i, (a, b) in enumerate(zip(first, last, strict=False)) if a != b), None)
    prefix = first[: len(first) if size is None else size]
    return _GLOB_SPECIALS.sub("?", prefix) + "*"


def _selector(family: _Family) -> Selector:
    if family.virtual:
        return Selector.build(name=_name_glob(family.names))
    if family.on_chain:
        return Selector.build(
            name=_name_glob(family.names),
            kind=family.kind,
            service=family.service,
            root=True if family.always_root else None,
        )
    if family.attribute is not None:
        return Selector.build(
            attributes={family.attribute: family.label}, kind=family.kind, service=family.service
        )
    return Selector.build(name=_name_glob(family.names), kind=family.kind, service=family.service)


def _stage_name(family: _Family, taken: set[str]) -> str:
    base = family.label
    if family.on_chain:
        base = _KIND_NAMES.get(family.kind, family.label)
    name = _NOT_NAME.sub("-", base.lower()).strip("-") or "stage"
    if name in taken:
        name = f"{name}-{_NOT_NAME.sub('-', family.service.lower()).strip('-')}"
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    return candidate
