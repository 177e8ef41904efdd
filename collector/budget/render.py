"""Budget parts written back as `budget.yaml` text that the strict loader reads the same.

Selectors and first-token marks render as YAML flow mappings; strings that YAML would
read as something else (numbers, booleans, globs) are quoted. Used by `budget suggest`,
which adds a comment to every number it writes.
"""

from __future__ import annotations

import json
import re

from .model import FirstTokenMark, Selector

__all__ = ["number", "render_mark", "render_selector", "scalar"]

# Plain YAML scalars that stay strings: a letter first, then letters, digits, _ . - /.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*")
# Plain words YAML 1.1 (PyYAML) reads as booleans or null.
_YAML_WORDS = frozenset(
    {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "none", "nan", "inf"}
)


def scalar(text: str) -> str:
    """A string as a YAML scalar that reads back as that string."""
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def number(value: float) -> str:
    """Milliseconds as the shortest text that reads back the same: 42, 4.5, 0.73."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _attribute_values(values: frozenset[str]) -> str:
    items = sorted(values)
    if len(items) == 1:
        return json.dumps(items[0])
    return "[" + ", ".join(json.dumps(v) for v in items) + "]"


def render_selector(selector: Selector) -> str:
    """`{name: "chat *", kind: client}`; attribute values quoted: they match as text."""
    fields: list[str] = []
    if selector.name is not None:
        fields.append(f"name: {scalar(selector.name)}")
    if selector.kind is not None:
        fields.append(f"kind: {selector.kind.value}")
    if selector.service is not None:
        fields.append(f"service: {scalar(selector.service)}")
    if selector.attributes:
        pairs = ", ".join(
            f"{scalar(key)}: {_attribute_values(values)}"
            for key, values in selector.attributes.items()
        )
        fields.append(f"attributes: {{{pairs}}}")
    if selector.root is not None:
        fields.append(f"root: {'true' if selector.root else 'false'}")
    return "{" + ", ".join(fields) + "}"


def render_mark(mark: FirstTokenMark) -> str:
    """One `first_token` item as a flow mapping."""
    fields: list[str] = []
    if mark.attribute is not None:
        fields.append(f"attribute: {scalar(mark.attribute)}")
        if mark.anchor is not None:
            fields.append(f"anchor: {{child_end: {render_selector(mark.anchor)}}}")
    else:
        names = sorted(mark.events)
        fields.append(
            f"event: {scalar(names[0])}"
            if len(names) == 1
            else "event: [" + ", ".join(scalar(n) for n in names) + "]"
        )
    if mark.match:
        fields.append("match: [" + ", ".join(render_selector(s) for s in mark.match) + "]")
    return "{" + ", ".join(fields) + "}"
