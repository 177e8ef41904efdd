"""Load and strictly validate `budget.yaml` (schema version 1) into a `Budget`.

Validation walks PyYAML's node tree rather than the loaded dict, so every error names the
file, the line and the field, with a hint on what to change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from spanbudget.collector.budget import Budget, GlobError, Selector, Stage, WhenAbsent, compile_glob
from spanbudget.collector.spans import SpanKind

__all__ = ["BudgetError", "LoadedBudget", "load_budget", "parse_budget"]

SCHEMA_VERSION = 1
_KINDS = ", ".join(kind.value for kind in SpanKind)
_WHEN_ABSENT = ", ".join(w.value for w in WhenAbsent)


class BudgetError(ValueError):
    """An invalid budget file. `str()` reads `FILE:LINE: FIELD: problem (hint: ...)`."""

    def __init__(self, source: str, line: int, field: str, problem: str, hint: str = "") -> None:
        self.source = source
        self.line = line
        self.field = field
        self.problem = problem
        self.hint = hint
        text = f"{source}:{line}: {field}: {problem}"
        super().__init__(f"{text} (hint: {hint})" if hint else text)


@dataclass(frozen=True, slots=True)
class LoadedBudget:
    budget: Budget
    warnings: tuple[str, ...]


class _Checker:
    """Walks YAML nodes for one file, raising `BudgetError` at the first problem."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: yaml.Node, field: str, problem: str, hint: str = "") -> BudgetError:
        return BudgetError(self.source, node.start_mark.line + 1, field, problem, hint)

    def mapping(
        self, node: yaml.Node, field: str, allowed: dict[str, str], required: set[str]
    ) -> dict[str, yaml.Node]:
        """Check a mapping's keys: no unknown, none missing, none repeated."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, field, f"expected a mapping, got {_describe(node)}")
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
        value = _construct(node)
        ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok, value = True, float(value)
        if not ok:
            expected = {str: "a string", int: "an integer", float: "a number", bool: "true/false"}
            raise self.fail(node, field, f"expected {expected[kind]}, got {_describe(node)}", hint)
        return value

    def milliseconds(self, node: yaml.Node, field: str) -> float:
        value = float(self.scalar(node, field, float, "a number of milliseconds, e.g. 40"))
        if not value > 0:
            raise self.fail(node, field, f"must be above 0, got {value:g}", "e.g. 40")
        return value

    def sequence(self, node: yaml.Node, field: str, hint: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, field, f"expected a list, got {_describe(node)}", hint)
        if not node.value:
            raise self.fail(node, field, "empty list", hint)
        return list(node.value)


def _construct(node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return yaml.SafeLoader("").construct_object(node)
    return None


def _describe(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    value = _construct(node)
    return f"{type(value).__name__} {value!r}" if value is not None else "nothing"


_TOP = {
    "version": f"the schema version, {SCHEMA_VERSION}",
    "name": "the budget's name, e.g. rag-ttft",
    "description": "one line on what the budget covers",
    "total": "{target_ms: 170, limit_ms: 250}",
    "slo": "{objective: 0.95}",
    "stages": "a list of stages",
}
_TOTAL = {"target_ms": "a number, e.g. 170", "limit_ms": "a number, e.g. 250"}
_SLO = {"objective": "the share of requests that must stay within limits, e.g. 0.95"}
_STAGE = {
    "name": "the stage's name, e.g. retrieval",
    "target_ms": "a number, e.g. 20",
    "limit_ms": "a number, e.g. 40",
    "when_absent": f"one of {_WHEN_ABSENT}",
    "match": "a list of selectors, e.g. [{name: 'retrieval*'}]",
}
_SELECTOR = {
    "name": "a glob on the span name",
    "kind": f"one of {_KINDS}",
    "service": "a glob on service.name",
    "attributes": "a mapping of attribute key to value or list of values",
    "root": "true: only the trace's root span",
}


def _target_and_limit(
    check: _Checker, fields: dict[str, yaml.Node], path: str
) -> tuple[float, float]:
    target = check.milliseconds(fields["target_ms"], f"{path}.target_ms")
    limit = check.milliseconds(fields["limit_ms"], f"{path}.limit_ms")
    if target > limit:
        raise check.fail(
            fields["target_ms"],
            f"{path}.target_ms",
            f"target {target:g} ms is above the limit {limit:g} ms",
            "the target is the comfortable value, the limit the most allowed: target <= limit",
        )
    return target, limit


def _selector(check: _Checker, node: yaml.Node, path: str) -> Selector:
    fields = check.mapping(node, path, _SELECTOR, set())
    if not fields:
        raise check.fail(node, path, "empty selector matches every span", "name at least one field")
    args: dict[str, Any] = {}
    for key in ("name", "service"):
        if key in fields:
            pattern = check.scalar(fields[key], f"{path}.{key}", str, _SELECTOR[key])
            try:
                compile_glob(pattern)
            except GlobError as exc:
                raise check.fail(
                    fields[key], f"{path}.{key}", f"bad glob: {exc}", "use *, ? and closed [...]"
                ) from None
            args[key] = pattern
    if "kind" in fields:
        text = check.scalar(fields["kind"], f"{path}.kind", str, _SELECTOR["kind"])
        try:
            args["kind"] = SpanKind(text.lower())
        except ValueError:
            raise check.fail(
                fields["kind"], f"{path}.kind", f"unknown kind {text!r}", f"one of {_KINDS}"
            ) from None
    if "root" in fields:
        args["root"] = check.scalar(fields["root"], f"{path}.root", bool, "true or false")
    if "attributes" in fields:
        args["attributes"] = _attributes(check, fields["attributes"], f"{path}.attributes")
    return Selector.build(**args)


def _attributes(check: _Checker, node: yaml.Node, path: str) -> dict[str, Any]:
    if not isinstance(node, yaml.MappingNode) or not node.value:
        raise check.fail(node, path, "expected a non-empty mapping", _SELECTOR["attributes"])
    result: dict[str, Any] = {}
    for key_node, value_node in node.value:
        key = check.scalar(key_node, path, str, "attribute keys are strings")
        field = f"{path}.{key}"
        if key in result:
            raise check.fail(key_node, field, "key given twice", "keep one of them")
        items = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        if not items:
            raise check.fail(
                value_node, field, "empty list of accepted values", "list at least one"
            )
        values = []
        for item in items:
            value = _construct(item)
            if value is None or isinstance(value, dict | list):
                raise check.fail(
                    item, field, f"expected a scalar value, got {_describe(item)}", "e.g. qdrant"
                )
            values.append(value)
        result[key] = values
    return result


def _stage(check: _Checker, node: yaml.Node, path: str) -> Stage:
    fields = check.mapping(node, path, _STAGE, {"name", "target_ms", "limit_ms", "match"})
    name = check.scalar(fields["name"], f"{path}.name", str, _STAGE["name"])
    target, limit = _target_and_limit(check, fields, path)
    when_absent = WhenAbsent.ZERO
    if "when_absent" in fields:
        text = check.scalar(
            fields["when_absent"], f"{path}.when_absent", str, _STAGE["when_absent"]
        )
        try:
            when_absent = WhenAbsent(text)
        except ValueError:
            raise check.fail(
                fields["when_absent"],
                f"{path}.when_absent",
                f"unknown value {text!r}",
                f"one of {_WHEN_ABSENT}",
            ) from None
    items = check.sequence(fields["match"], f"{path}.match", _STAGE["match"])
    selectors = tuple(_selector(check, item, f"{path}.match[{i}]") for i, item in enumerate(items))
    return Stage(name, target, limit, selectors, when_absent)


def _budget(check: _Checker, root: yaml.Node) -> LoadedBudget:
    fields = check.mapping(root, "", _TOP, {"version", "name", "total", "stages"})
    version = check.scalar(fields["version"], "version", int, _TOP["version"])
    if version != SCHEMA_VERSION:
        raise check.fail(
            fields["version"], "version", f"unsupported version {version}", f"use {SCHEMA_VERSION}"
        )
    name = check.scalar(fields["name"], "name", str, _TOP["name"])
    description = ""
    if "description" in fields:
        description = check.scalar(fields["description"], "description", str, _TOP["description"])
    total = check.mapping(fields["total"], "total", _TOTAL, set(_TOTAL))
    total_target, total_limit = _target_and_limit(check, total, "total")
    objective = 0.95
    if "slo" in fields:
        slo = check.mapping(fields["slo"], "slo", _SLO, set(_SLO))
        objective = check.scalar(slo["objective"], "slo.objective", float, _SLO["objective"])
        if not 0 < objective < 1:
            raise check.fail(
                slo["objective"],
                "slo.objective",
                f"{objective:g} is not between 0 and 1",
                "e.g. 0.95",
            )
    stages: list[Stage] = []
    stage_nodes = check.sequence(fields["stages"], "stages", _TOP["stages"])
    for index, node in enumerate(stage_nodes):
        stage = _stage(check, node, f"stages[{index}]")
        if any(s.name == stage.name for s in stages):
            raise check.fail(
                node,
                f"stages[{index}].name",
                f"duplicate stage {stage.name!r}",
                "stage names are unique",
            )
        stages.append(stage)
    warnings = []
    limits = sum(stage.limit_ms for stage in stages)
    if limits > total_limit:
        warnings.append(
            f"{check.source}: the stage limits add up to {limits:g} ms, above the total limit "
            f"{total_limit:g} ms: a trace can overrun in total with every stage within its limit"
        )
    budget = Budget(
        name=name,
        total_target_ms=total_target,
        total_limit_ms=total_limit,
        stages=tuple(stages),
        slo_objective=objective,
        description=description,
        version=version,
    )
    return LoadedBudget(budget, tuple(warnings))


def parse_budget(text: str, source: str = "budget.yaml") -> LoadedBudget:
    """Validate budget YAML text; raises `BudgetError` naming `source`, line and field."""
    check = _Checker(source)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise BudgetError(source, line, "(yaml)", str(exc.problem), "fix the YAML syntax") from None
    if root is None:
        raise BudgetError(
            source, 1, "(file)", "empty file", "start from the repository's budget.yaml"
        )
    return _budget(check, root)


def load_budget(path: Path, *, read: Callable[[Path], str] = Path.read_text) -> LoadedBudget:
    """Read and validate a budget file; raises `BudgetError` (also for an unreadable file)."""
    try:
        text = read(path)
    except OSError as exc:
        raise BudgetError(
            str(path), 0, "(file)", exc.strerror or str(exc), "check the path"
        ) from None
    return parse_budget(text, str(path))
