"""YAML nodes checked for a budget file: errors that name the file, the line and the field.

PyYAML's node tree keeps where every value was written; a tree merged from several files
(`budget_extends`) keeps each node's own file, and the errors name that one.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import CollectorError

__all__ = ["BudgetError", "NodeChecker", "compose", "construct", "describe"]


class BudgetError(CollectorError, ValueError):
    """An invalid budget file. `str()` reads `FILE:LINE: FIELD: problem (hint: ...)`."""

    def __init__(self, source: str, line: int, field: str, problem: str, hint: str = "") -> None:
        self.source = source
        self.line = line
        self.field = field
        self.problem = problem
        self.hint = hint
        text = f"{source}:{line}: {field}: {problem}"
        super().__init__(f"{text} (hint: {hint})" if hint else text)


class NodeChecker:
    """Walks YAML nodes, raising `BudgetError` at the first problem.

    Errors name the file a node came from (merged trees mix files), else `source`.
    """

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: yaml.Node, field: str, problem: str, hint: str = "") -> BudgetError:
        mark = node.start_mark
        return BudgetError(mark.name or self.source, mark.line + 1, field, problem, hint)

    def mapping(
        self, node: yaml.Node, field: str, allowed: dict[str, str], required: set[str]
    ) -> dict[str, yaml.Node]:
        """Check a mapping's keys: no unknown, none missing, none repeated."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, field, f"expected a mapping, got {describe(node)}")
        seen: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            path = f"{field}.{key}" if field else str(key)
            if key not in allowed:
                known = ", ".join(allowed)
                raise self.fail(key_node, path, f"unknown key {key!r}", f"known keys: {known}")
            if key in seen:
                raise self.fail(key_node, path, "key given twice", "keep one of them")
            seen[key] = value_node
        for key in sorted(required - seen.keys()):
            path = f"{field}.{key}" if field else key
            raise self.fail(node, path, "missing", f"add `{key}`: {allowed[key]}")
        return seen

    def scalar(self, node: yaml.Node, field: str, kind: type, hint: str) -> Any:
        value = construct(node)
        ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok, value = True, float(value)
        if not ok:
            expected = {str: "a string", int: "an integer", float: "a number", bool: "true/false"}
            raise self.fail(node, field, f"expected {expected[kind]}, got {describe(node)}", hint)
        return value

    def milliseconds(self, node: yaml.Node, field: str) -> float:
        value = float(self.scalar(node, field, float, "a number of milliseconds, e.g. 40"))
        if not value > 0:
            raise self.fail(node, field, f"must be above 0, got {value:g}", "e.g. 40")
        return value

    def sequence(self, node: yaml.Node, field: str, hint: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, field, f"expected a list, got {describe(node)}", hint)
        if not node.value:
            raise self.fail(node, field, "empty list", hint)
        return list(node.value)


def construct(node: yaml.Node) -> Any:
    """A scalar node's value as YAML reads it; None for a mapping or a list."""
    if isinstance(node, yaml.ScalarNode):
        return yaml.SafeLoader("").construct_object(node)
    return None


def describe(node: yaml.Node) -> str:
    """What a node holds, for an error message: `a mapping`, `a list`, `str 'x'`."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    value = construct(node)
    return f"{type(value).__name__} {value!r}" if value is not None else "nothing"


def compose(text: str, source: str) -> yaml.Node:
    """The node tree of one file, every mark naming `source`."""
    loader = yaml.SafeLoader(text)
    loader.name = source
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise BudgetError(source, line, "(yaml)", str(exc.problem), "fix the YAML syntax") from None
    finally:
        loader.dispose()
    if root is None:
        raise BudgetError(
            source, 1, "(file)", "empty file", "start from the repository's budget.yaml"
        )
    return root
