"""A budget file that extends another (a preset): the two YAML node trees merged into one.

Every node keeps the mark of the file it came from, so the strict checks that run on the
merged tree name the file and line where the offending value was written.

What overrides what: the extending file's top-level keys replace the extended file's;
`total` and `slo` are overridden key by key; a stage whose `name` is already there is
overridden key by key (its place in claim order stays), a stage with a new name is added
after them. `preset` and `extends` themselves do not carry over.
"""

from __future__ import annotations

import yaml

__all__ = ["EXTENDS_KEYS", "extended_name", "merge_roots", "scalar_text", "stage_name"]

EXTENDS_KEYS = ("preset", "extends")
_KEYWISE = frozenset({"total", "slo"})
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"

_Pairs = list[tuple[yaml.Node, yaml.Node]]


def scalar_text(node: yaml.Node) -> str | None:
    """A scalar node's text, or None for a mapping or a list."""
    return node.value if isinstance(node, yaml.ScalarNode) else None


def extended_name(root: yaml.Node) -> tuple[str, yaml.Node] | None:
    """(`preset` or `extends`, its value node) when a mapping root names what it extends."""
    if not isinstance(root, yaml.MappingNode):
        return None
    for key_node, value_node in root.value:
        key = scalar_text(key_node)
        if key in EXTENDS_KEYS:
            return key, value_node
    return None


def merge_roots(child: yaml.MappingNode, parent: yaml.MappingNode) -> yaml.MappingNode:
    """The child's top-level mapping laid over the parent's (see the module docstring)."""
    pairs: _Pairs = [(k, v) for k, v in parent.value if scalar_text(k) not in EXTENDS_KEYS]
    for key_node, value_node in child.value:
        key = scalar_text(key_node)
        if key in EXTENDS_KEYS:
            continue
        index = _find(pairs, key)
        if index is None:
            pairs.append((key_node, value_node))
            continue
        old = pairs[index][1]
        if key == "stages" and _both(old, value_node, yaml.SequenceNode):
            value_node = _merge_stages(value_node, old)  # type: ignore[arg-type]
        elif key in _KEYWISE and _both(old, value_node, yaml.MappingNode):
            value_node = _merge_mappings(value_node, old)  # type: ignore[arg-type]
        pairs[index] = (key_node, value_node)
    return yaml.MappingNode(_MAP_TAG, pairs, child.start_mark, child.end_mark)


def _both(a: yaml.Node, b: yaml.Node, kind: type[yaml.Node]) -> bool:
    return isinstance(a, kind) and isinstance(b, kind)


def _find(pairs: _Pairs, key: str | None) -> int | None:
    if key is None:
        return None
    for index, (key_node, _) in enumerate(pairs):
        if scalar_text(key_node) == key:
            return index
    return None


def _merge_mappings(child: yaml.MappingNode, parent: yaml.MappingNode) -> yaml.MappingNode:
    """Key by key. A key the child repeats is kept twice, so that the check reports it."""
    pairs: _Pairs = list(parent.value)
    overridden: set[str] = set()
    for key_node, value_node in child.value:
        key = scalar_text(key_node)
        index = _find(pairs, key)
        if key is None or key in overridden or index is None:
            pairs.append((key_node, value_node))
        else:
            pairs[index] = (key_node, value_node)
            overridden.add(key)
    return yaml.MappingNode(_MAP_TAG, pairs, child.start_mark, child.end_mark)


def stage_name(node: yaml.Node) -> str | None:
    """The `name` a stage's mapping gives, as text, if it gives one."""
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if scalar_text(key_node) == "name":
            return scalar_text(value_node)
    return None


def _merge_stages(child: yaml.SequenceNode, parent: yaml.SequenceNode) -> yaml.SequenceNode:
    """Stages by name; a name given twice is kept twice, so that the check reports it."""
    items: list[yaml.Node] = list(parent.value)
    names = [stage_name(item) for item in items]
    overridden: set[str] = set()
    for item in child.value:
        name = stage_name(item)
        if name is not None and name in names and name not in overridden:
            index = names.index(name)
            items[index] = _merge_mappings(item, items[index])  # type: ignore[arg-type]
            overridden.add(name)
        else:
            items.append(item)
    return yaml.SequenceNode(_SEQ_TAG, items, child.start_mark, child.end_mark)
