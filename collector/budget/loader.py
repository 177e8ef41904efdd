"""Load and strictly validate `budget.yaml` (schema version 1) into a `Budget`.

Validation walks PyYAML's node tree rather than the loaded dict, so every error names the
file, the line and the field, with a hint on what to change. A file that extends a preset
(or another file) is merged with it node by node first (`budget_extends`), and the merged
tree is checked as strictly, each error naming the file that holds the offending line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ..spans import SpanKind
from .extends import (
    EXTENDS_KEYS,
    extended_name,
    merge_roots,
    scalar_text,
    stage_name,
)
from .model import (
    DEFAULT_FIRST_TOKEN,
    Budget,
    FirstTokenMark,
    GlobError,
    NonStreamed,
    Selector,
    Stage,
    WhenAbsent,
    compile_glob,
)
from .nodes import (
    BudgetError,
    NodeChecker,
    compose,
    construct,
    describe,
)
from .presets import UnknownPresetError, preset_names, preset_path

__all__ = [
    "BudgetError",
    "BudgetNames",
    "LoadedBudget",
    "load_budget",
    "load_preset",
    "parse_budget",
]

SCHEMA_VERSION = 1
_KINDS = ", ".join(kind.value for kind in SpanKind)
_WHEN_ABSENT = ", ".join(w.value for w in WhenAbsent)


@dataclass(frozen=True, slots=True)
class LoadedBudget:
    budget: Budget
    warnings: tuple[str, ...]


_TOP = {
    "version": f"the schema version, {SCHEMA_VERSION}",
    "preset": "a packaged preset to extend, e.g. openinference",
    "extends": "a packaged preset, or a budget file (relative to this one), to extend",
    "name": "the budget's name, e.g. rag-ttft",
    "description": "one line on what the budget covers",
    "total": "{target_ms: 170, limit_ms: 250}",
    "slo": "{objective: 0.95}",
    "first_token": "a list of first-token marks, e.g. [{event: First Token Stream Event}]",
    "non_streamed": "what a request that was not streamed is: skip (left out of the TTFT SLO,"
    " the default) or judge (its whole response as its first token)",
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
_MARK = {
    "attribute": "an attribute holding seconds to the first token, e.g. "
    "gen_ai.response.time_to_first_chunk",
    "event": "a span event (or a list of them) whose first one is the first token",
    "anchor": "what an attribute counts from: span_start (default) or "
    "{child_end: SELECTOR}, the end of the latest-starting child that matches",
    "match": "a list of selectors: only spans that match carry the mark",
    "first_child": "a selector: where two or more of the span's children match, the start of"
    " the earliest is the first token (a server's first response-body send of a stream)",
    "estimate": "true: the mark can be off by an unknown amount, and verdicts say so",
}
_ANCHOR_START = "span_start"
_MAX_EXTENDS = 8
_ANCHOR = {"child_end": "a selector for the child span whose end the attribute counts from"}


def _target_and_limit(
    check: NodeChecker, fields: dict[str, yaml.Node], path: str
) -> tuple[float, float]:
    target = check.milliseconds(fields["target_ms"], f"{path}.target_ms")
    limit = check.milliseconds(fields["limit_ms"], f"{path}.limit_ms")
    if target > limit:
        at, other = "target_ms", "limit_ms"
        if (
            fields["limit_ms"].start_mark.name
            == check.source
            != fields["target_ms"].start_mark.name
        ):
            at, other = other, at  # the file being loaded overrode the limit: point there
        problem = f"target {target:g} ms is above the limit {limit:g} ms"
        mark = fields[other].start_mark
        if mark.name != fields[at].start_mark.name:
            problem += f" ({other} from {mark.name}:{mark.line + 1})"
        raise check.fail(
            fields[at],
            f"{path}.{at}",
            problem,
            "the target is the comfortable value, the limit the most allowed: target <= limit",
        )
    return target, limit


def _selector(check: NodeChecker, node: yaml.Node, path: str) -> Selector:
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


def _attributes(check: NodeChecker, node: yaml.Node, path: str) -> dict[str, Any]:
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
            value = construct(item)
            if value is None or isinstance(value, dict | list):
                raise check.fail(
                    item, field, f"expected a scalar value, got {describe(item)}", "e.g. qdrant"
                )
            values.append(value)
        result[key] = values
    return result


def _selectors(check: NodeChecker, node: yaml.Node, path: str, hint: str) -> tuple[Selector, ...]:
    items = check.sequence(node, path, hint)
    return tuple(_selector(check, item, f"{path}[{i}]") for i, item in enumerate(items))


def _mark(check: NodeChecker, node: yaml.Node, path: str) -> FirstTokenMark:
    fields = check.mapping(node, path, _MARK, set())
    if sum(key in fields for key in ("attribute", "event", "first_child")) != 1:
        raise check.fail(
            node,
            path,
            "give one of `attribute`, `event` or `first_child`",
            "one mark reads one of them",
        )
    match: tuple[Selector, ...] = ()
    if "match" in fields:
        match = _selectors(check, fields["match"], f"{path}.match", _MARK["match"])
    estimate = False
    if "estimate" in fields:
        estimate = check.scalar(fields["estimate"], f"{path}.estimate", bool, _MARK["estimate"])
    if "first_child" in fields:
        if "anchor" in fields:
            raise check.fail(
                fields["anchor"],
                f"{path}.anchor",
                "a child's start is an instant of its own",
                "anchor goes with attribute only",
            )
        child = _selector(check, fields["first_child"], f"{path}.first_child")
        return FirstTokenMark(first_child=child, match=match, estimate=estimate)
    if "event" in fields:
        if "anchor" in fields:
            raise check.fail(
                fields["anchor"],
                f"{path}.anchor",
                "an event is an instant of its own",
                "anchor goes with attribute only",
            )
        value = fields["event"]
        items = value.value if isinstance(value, yaml.SequenceNode) else [value]
        if not items:
            raise check.fail(value, f"{path}.event", "empty list of events", _MARK["event"])
        names = frozenset(
            check.scalar(item, f"{path}.event", str, _MARK["event"]) for item in items
        )
        return FirstTokenMark(events=names, match=match, estimate=estimate)
    attribute = check.scalar(fields["attribute"], f"{path}.attribute", str, _MARK["attribute"])
    anchor = None
    if "anchor" in fields:
        anchor_node = fields["anchor"]
        if scalar_text(anchor_node) != _ANCHOR_START:
            anchor_fields = check.mapping(anchor_node, f"{path}.anchor", _ANCHOR, set(_ANCHOR))
            anchor = _selector(check, anchor_fields["child_end"], f"{path}.anchor.child_end")
    return FirstTokenMark(attribute=attribute, anchor=anchor, match=match, estimate=estimate)


def _stage_label(node: yaml.Node, index: int, extended: bool) -> str:
    """`stages[2]`; in a merged tree, where indexes are not the file's, `stages[retrieval]`."""
    name = stage_name(node) if extended else None
    return f"stages[{name}]" if name else f"stages[{index}]"


def _stage(check: NodeChecker, node: yaml.Node, path: str) -> Stage:
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
    selectors = _selectors(check, fields["match"], f"{path}.match", _STAGE["match"])
    return Stage(name, target, limit, selectors, when_absent)


def _version(check: NodeChecker, fields: dict[str, yaml.Node]) -> int:
    version: int = check.scalar(fields["version"], "version", int, _TOP["version"])
    if version != SCHEMA_VERSION:
        raise check.fail(
            fields["version"], "version", f"unsupported version {version}", f"use {SCHEMA_VERSION}"
        )
    return version


def _budget(
    check: NodeChecker, root: yaml.Node, *, extended: bool = False, preset: str | None = None
) -> LoadedBudget:
    fields = check.mapping(root, "", _TOP, {"version", "name", "total", "stages"})
    version = _version(check, fields)
    name = check.scalar(fields["name"], "name", str, _TOP["name"])
    description = ""
    if "description" in fields:
        description = check.scalar(fields["description"], "description", str, _TOP["description"])
    total = check.mapping(fields["total"], "total", _TOTAL, set(_TOTAL))
    total_target, total_limit = _target_and_limit(check, total, "total")
    first_token: tuple[FirstTokenMark, ...] = DEFAULT_FIRST_TOKEN
    if "first_token" in fields:
        nodes = check.sequence(fields["first_token"], "first_token", _TOP["first_token"])
        first_token = tuple(_mark(check, node, f"first_token[{i}]") for i, node in enumerate(nodes))
    non_streamed = NonStreamed.SKIP
    if "non_streamed" in fields:
        text = check.scalar(fields["non_streamed"], "non_streamed", str, _TOP["non_streamed"])
        try:
            non_streamed = NonStreamed(text)
        except ValueError:
            raise check.fail(
                fields["non_streamed"],
                "non_streamed",
                f"unknown value {text!r}",
                "one of skip, judge",
            ) from None
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
        label = _stage_label(node, index, extended)
        given = stage_name(node)
        if given is not None and any(s.name == given for s in stages):
            # Before the stage's own checks: a second override of a preset's stage lacks
            # the numbers, and the repeat is what to report.
            raise check.fail(
                node, f"{label}.name", f"duplicate stage {given!r}", "stage names are unique"
            )
        stages.append(_stage(check, node, label))
    warnings = []
    limits = sum(stage.limit_ms for stage in stages)
    if round(limits, 6) > total_limit:  # not for the float noise of adding decimals
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
        first_token=first_token,
        preset=preset,
        non_streamed=non_streamed,
    )
    return LoadedBudget(budget, tuple(warnings))


def _read(path: Path, read: Callable[[Path], str], node: yaml.Node | None = None) -> str:
    try:
        return read(path)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if node is None:
            raise BudgetError(str(path), 0, "(file)", reason, "check the path") from None
        mark = node.start_mark
        raise BudgetError(
            mark.name, mark.line + 1, "extends", f"{path}: {reason}", "check the path"
        ) from None


@dataclass(frozen=True, slots=True)
class _Parent:
    root: yaml.MappingNode
    preset: str | None  # the packaged preset at the bottom of the chain, if any


def _parent(
    check: NodeChecker,
    root: yaml.Node,
    base_dir: Path,
    read: Callable[[Path], str],
    chain: tuple[str, ...],
) -> _Parent | None:
    """What `root` extends, loaded, checked on its own and merged down its own chain."""
    named = extended_name(root)
    if named is None:
        return None
    fields = check.mapping(root, "", _TOP, {"version"})
    _version(check, fields)
    if all(key in fields for key in EXTENDS_KEYS):
        raise check.fail(
            fields["extends"], "extends", "both `preset` and `extends`", "keep one of them"
        )
    key, node = named
    target = check.scalar(node, key, str, _TOP[key])
    looks_like_a_path = target.endswith((".yaml", ".yml")) or "/" in target
    if key == "preset" or not looks_like_a_path:
        try:
            path = preset_path(target)
        except UnknownPresetError:
            raise check.fail(
                node, key, f"unknown preset {target!r}", f"one of {', '.join(preset_names())}"
            ) from None
        preset: str | None = target
        text = path.read_text()
        source = f"preset {target} ({path})"
    else:
        path = base_dir / target
        preset = None
        text = _read(path, read, node)
        source = str(path)
    identity = str(path.resolve())
    if identity in chain:
        raise check.fail(node, key, f"{target} extends this file again", "break the cycle")
    if len(chain) > _MAX_EXTENDS:
        raise check.fail(node, key, "too many files extend one another", "flatten the chain")
    parent_root = compose(text, source)
    parent_check = NodeChecker(source)
    grandparent = _parent(parent_check, parent_root, path.parent, read, (*chain, identity))
    if grandparent is not None:
        parent_root = merge_roots(parent_root, grandparent.root)  # type: ignore[arg-type]
        preset = preset or grandparent.preset
    _budget(parent_check, parent_root, extended=grandparent is not None, preset=preset)
    return _Parent(parent_root, preset)  # type: ignore[arg-type]


def parse_budget(
    text: str,
    source: str = "budget.yaml",
    *,
    base_dir: Path | None = None,
    read: Callable[[Path], str] = Path.read_text,
) -> LoadedBudget:
    """Validate budget YAML text; raises `BudgetError` naming the file, line and field.

    A relative `extends:` path is taken from `base_dir` (default: the working directory).
    """
    check = NodeChecker(source)
    root = compose(text, source)
    parent = _parent(check, root, base_dir or Path("."), read, (str(Path(source).resolve()),))
    if parent is None:
        return _budget(check, root)
    merged = merge_roots(root, parent.root)  # type: ignore[arg-type]
    return _budget(check, merged, extended=True, preset=parent.preset)


def load_preset(name: str) -> LoadedBudget:
    """A packaged preset as it is; raises `UnknownPresetError`."""
    path = preset_path(name)
    loaded = parse_budget(path.read_text(), f"preset {name} ({path})", base_dir=path.parent)
    return LoadedBudget(replace(loaded.budget, preset=name), loaded.warnings)


class BudgetNames:
    """A budget by the name its verdicts give it: the one in effect (`current()`), or a
    shipped preset's, the budgets a recognised library's traces are judged by (read once,
    when first asked for); None for another (a budget reloaded since, say)."""

    def __init__(self, current: Callable[[], Budget | None] = lambda: None) -> None:
        self._current = current
        self._presets: dict[str, Budget] | None = None

    def __call__(self, name: str) -> Budget | None:
        current = self._current()
        if current is not None and name == current.name:
            return current
        if self._presets is None:
            presets: dict[str, Budget] = {}
            for preset in preset_names():
                budget = load_preset(preset).budget
                presets.setdefault(budget.name, budget)
            self._presets = presets
        return self._presets.get(name)


def load_budget(path: Path, *, read: Callable[[Path], str] = Path.read_text) -> LoadedBudget:
    """Read and validate a budget file; raises `BudgetError` (also for an unreadable file)."""
    text = _read(path, read)
    return parse_budget(text, str(path), base_dir=path.parent, read=read)
