"""budget.yaml: the shipped table loads as DESIGN §4 says; bad files name file, line, field."""

from __future__ import annotations

from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import BudgetError, load_budget, parse_budget
from spanbudget.collector.budget.model import WhenAbsent
from spanbudget.collector.spans import SpanKind

REPO = Path(__file__).resolve().parents[3]

VALID = """\
version: 1
name: t
total: {target_ms: 170, limit_ms: 250}
stages:
  - name: gateway
    target_ms: 10
    limit_ms: 15
    match: [{kind: server, service: rag-gateway}]
  - name: retrieval
    target_ms: 20
    limit_ms: 40
    match: [{attributes: {db.system.name: qdrant}}]
"""


def test_shipped_budget_is_the_sub_250ms_table() -> None:
    loaded = load_budget(REPO / "budget.yaml")
    budget = loaded.budget
    assert loaded.warnings == ()
    assert (budget.name, budget.total_target_ms, budget.total_limit_ms) == ("rag-ttft", 170, 250)
    assert budget.slo_objective == 0.95
    assert [(s.name, s.target_ms, s.limit_ms) for s in budget.stages] == [
        ("network", 30, 50),
        ("gateway", 10, 15),
        ("retrieval", 20, 40),
        ("prompt", 10, 20),
        ("prefill", 100, 120),
    ]
    network = budget.stages[0]
    assert network.when_absent is WhenAbsent.UNMEASURED
    assert network.selectors[0].kind is SpanKind.CLIENT
    assert network.selectors[0].root is True
    retrieval = budget.stages[2]
    assert retrieval.selectors[0].attributes == {
        "gen_ai.operation.name": frozenset({"retrieval", "embeddings"})
    }


def test_valid_minimal_budget_loads() -> None:
    budget = parse_budget(VALID, "mine.yaml").budget
    assert budget.stage_names() == ["gateway", "retrieval"]
    assert budget.stages[0].when_absent is WhenAbsent.ZERO


def error_of(text: str) -> BudgetError:
    with pytest.raises(BudgetError) as info:
        parse_budget(text, "mine.yaml")
    return info.value


@pytest.mark.parametrize(
    ("old", "new", "line", "field", "words", "hint"),
    [
        ("name: t\n", "name: t\nowner: me\n", 3, "owner", "unknown key 'owner'", "known keys"),
        (
            "    limit_ms: 15\n",
            "    limit_ms: 15\n    colour: red\n",
            8,
            "stages[0].colour",
            "unknown key",
            "known keys",
        ),
        (
            "match: [{kind: server, service: rag-gateway}]",
            "match: [{kind: server, servce: rag-gateway}]",
            8,
            "stages[0].match[0].servce",
            "unknown key",
            "service",
        ),
        ("    target_ms: 20\n", "", 9, "stages[1].target_ms", "missing", "add `target_ms`"),
        ("total: {target_ms: 170, limit_ms: 250}\n", "", 1, "total", "missing", "add `total`"),
        (
            "    target_ms: 20\n",
            "    target_ms: 45\n",
            10,
            "stages[1].target_ms",
            "above the limit",
            "target <= limit",
        ),
        (
            "target_ms: 170, limit_ms: 250",
            "target_ms: 300, limit_ms: 250",
            3,
            "total.target_ms",
            "above the limit",
            "target <= limit",
        ),
        (
            "  - name: retrieval\n",
            "  - name: gateway\n",
            9,
            "stages[1].name",
            "duplicate stage 'gateway'",
            "unique",
        ),
        (
            "{kind: server,",
            "{kind: sever,",
            8,
            "stages[0].match[0].kind",
            "unknown kind 'sever'",
            "server, client",
        ),
        (
            "service: rag-gateway}",
            "service: 'rag-[gateway'}",
            8,
            "stages[0].match[0].service",
            "bad glob",
            "closed [...]",
        ),
        (
            "    limit_ms: 40\n",
            "    limit_ms: forty\n",
            11,
            "stages[1].limit_ms",
            "expected a number, got str 'forty'",
            "milliseconds",
        ),
        ("version: 1", "version: '1'", 1, "version", "expected an integer", "schema version"),
        ("name: t", "name: [t]", 2, "name", "expected a string, got a list", "rag-ttft"),
        (
            "match: [{attributes: {db.system.name: qdrant}}]",
            "match: {attributes: x}",
            12,
            "stages[1].match",
            "expected a list",
            "selectors",
        ),
        ("version: 1", "version: 2", 1, "version", "unsupported version 2", "use 1"),
        (
            "    limit_ms: 15\n",
            "    limit_ms: 15\n    when_absent: sometimes\n",
            8,
            "stages[0].when_absent",
            "unknown value 'sometimes'",
            "zero, unmeasured",
        ),
        (
            "    limit_ms: 15\n",
            "    limit_ms: 15\n    limit_ms: 16\n",
            8,
            "stages[0].limit_ms",
            "key given twice",
            "keep one",
        ),
        (
            "{kind: server, service: rag-gateway}",
            "{}",
            8,
            "stages[0].match[0]",
            "empty selector",
            "at least one",
        ),
        (
            "{kind: server,",
            "{kind: server, root: maybe,",
            8,
            "stages[0].match[0].root",
            "expected true/false",
            "true or false",
        ),
        (
            "    target_ms: 10\n",
            "    target_ms: -1\n",
            6,
            "stages[0].target_ms",
            "must be above 0",
            "e.g. 40",
        ),
    ],
)
def test_each_invalid_case_names_file_line_and_field(
    old: str, new: str, line: int, field: str, words: str, hint: str
) -> None:
    assert old in VALID
    error = error_of(VALID.replace(old, new, 1))
    assert error.source == "mine.yaml"
    assert (error.line, error.field) == (line, field), str(error)
    assert words in error.problem
    assert hint in error.hint
    assert str(error).startswith(f"mine.yaml:{line}: {field}: ")


def test_yaml_syntax_error_names_the_line() -> None:
    error = error_of(VALID.replace("  - name: retrieval", "  - name: [retrieval"))
    assert error.line >= 9
    assert error.field == "(yaml)"


def test_empty_file_and_missing_file() -> None:
    assert "empty file" in str(error_of(""))
    with pytest.raises(BudgetError, match=r"nope\.yaml"):
        load_budget(Path("/nonexistent/nope.yaml"))


def test_stage_limits_above_total_is_a_warning_not_an_error() -> None:
    text = VALID.replace("target_ms: 170, limit_ms: 250", "target_ms: 40, limit_ms: 50")
    loaded = parse_budget(text, "mine.yaml")
    assert loaded.budget.total_limit_ms == 50
    assert len(loaded.warnings) == 1
    assert "55 ms" in loaded.warnings[0]
