"""budget.yaml with `preset:`/`extends:` and `first_token:`: merged node by node, checked as
strictly as a plain file, every error naming the file and line that holds the value."""

from __future__ import annotations

from pathlib import Path

import pytest
from spanbudget.collector.budget.loader import BudgetError, load_budget, load_preset, parse_budget
from spanbudget.collector.budget.model import DEFAULT_FIRST_TOKEN, WhenAbsent
from spanbudget.collector.budget.presets import UnknownPresetError, preset_names, preset_path
from spanbudget.collector.spans import SpanKind

PRESETS = ("genai", "openinference", "openlit", "openllmetry", "vllm", "vllm-v0")


def error_of(text: str, source: str = "mine.yaml", **kwargs: object) -> BudgetError:
    with pytest.raises(BudgetError) as caught:
        parse_budget(text, source, **kwargs)  # type: ignore[arg-type]
    return caught.value


def test_the_shipped_presets() -> None:
    assert preset_names() == PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_strictly_and_fits_its_total(name: str) -> None:
    loaded = load_preset(name)
    budget = loaded.budget
    assert loaded.warnings == ()
    assert budget.preset == name
    assert sum(s.limit_ms for s in budget.stages) <= budget.total_limit_ms
    assert sum(s.target_ms for s in budget.stages) <= budget.total_target_ms
    # Every preset falls back to vLLM's own mark when the engine is in the trace, and the
    # libraries' presets last of all to the server's first body send.
    sources = [mark.source for mark in budget.first_token]
    assert "vllm" in sources
    if not name.startswith("vllm"):
        assert sources[-1] == "first child"
        assert sources.index("vllm") == len(sources) - 2


def test_preset_marks_as_the_research_found_them() -> None:
    openlit = load_preset("openlit").budget.first_token[0]
    assert openlit.attribute == "gen_ai.server.time_to_first_token"
    assert openlit.anchor is not None
    assert openlit.anchor.kind is SpanKind.CLIENT
    assert openlit.match[0].attributes == {"gen_ai.request.stream": frozenset({"true"})}
    assert load_preset("openllmetry").budget.first_token[0].events == {
        "gen_ai.content.completion.chunk",
        "llm.content.completion.chunk",
    }
    assert load_preset("openinference").budget.first_token[0].events == {"First Token Stream Event"}
    assert load_preset("vllm").budget.first_token == DEFAULT_FIRST_TOKEN


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(UnknownPresetError) as caught:
        preset_path("phoenix")
    assert "openinference" in str(caught.value)
    error = error_of("version: 1\npreset: phoenix\n")
    assert (error.source, error.line, error.field) == ("mine.yaml", 2, "preset")
    assert "openinference" in error.hint


def test_a_file_with_only_a_preset_is_the_preset() -> None:
    budget = parse_budget("version: 1\npreset: openinference\n").budget
    assert budget == load_preset("openinference").budget


def test_overrides_numbers_keep_selectors_and_claim_order() -> None:
    text = """\
version: 1
extends: openinference
name: my-app
total: {limit_ms: 1200}
slo: {objective: 0.99}
stages:
  - {name: llm, target_ms: 500, limit_ms: 700}
  - name: cache
    target_ms: 2
    limit_ms: 5
    when_absent: unmeasured
    match: [{name: "cache.*"}]
"""
    loaded = parse_budget(text, "mine.yaml")
    budget, preset = loaded.budget, load_preset("openinference").budget
    assert (budget.name, budget.preset, budget.slo_objective) == ("my-app", "openinference", 0.99)
    assert (budget.total_target_ms, budget.total_limit_ms) == (preset.total_target_ms, 1200)
    assert budget.stage_names() == [*preset.stage_names(), "cache"]
    llm = budget.stage("llm")
    assert (llm.target_ms, llm.limit_ms) == (500, 700)
    assert llm.selectors == preset.stage("llm").selectors
    assert budget.stage("cache").when_absent is WhenAbsent.UNMEASURED
    assert budget.first_token == preset.first_token
    assert loaded.warnings == ()


def test_an_override_that_breaks_target_below_limit_points_at_the_override() -> None:
    error = error_of("version: 1\npreset: vllm\nstages:\n  - {name: queue, limit_ms: 5}\n")
    assert (error.source, error.line, error.field) == ("mine.yaml", 4, "stages[queue].limit_ms")
    assert "target 50 ms is above the limit 5 ms" in error.problem
    assert "target_ms from preset vllm" in error.problem
    error = error_of("version: 1\npreset: vllm\nstages:\n  - {name: queue, target_ms: 500}\n")
    assert (error.line, error.field) == (4, "stages[queue].target_ms")
    assert "limit_ms from preset vllm" in error.problem


@pytest.mark.parametrize(
    ("text", "line", "field", "problem"),
    [
        ("version: 1\npreset: vllm\nbogus: 1\n", 3, "bogus", "unknown key"),
        ("preset: vllm\nname: x\n", 1, "version", "missing"),
        ("version: 2\npreset: vllm\n", 1, "version", "unsupported version 2"),
        ("version: 1\npreset: [vllm]\n", 2, "preset", "expected a string"),
        ("version: 1\npreset: vllm\nextends: genai\n", 3, "extends", "both"),
        (
            "version: 1\npreset: vllm\nstages:\n  - {name: queue, limit_ms: 90, limit_ms: 95}\n",
            4,
            "stages[queue].limit_ms",
            "key given twice",
        ),
        (
            "version: 1\npreset: vllm\nstages:\n  - {name: queue, limit: 90}\n",
            4,
            "stages[queue].limit",
            "unknown key",
        ),
        (
            "version: 1\npreset: vllm\nstages:\n  - {name: queue}\n  - {name: queue}\n",
            5,
            "stages[queue].name",
            "duplicate stage",
        ),
        (
            "version: 1\npreset: vllm\nstages:\n  - {name: new, target_ms: 1, limit_ms: 2}\n",
            4,
            "stages[new].match",
            "missing",
        ),
    ],
)
def test_strict_with_a_preset_too(text: str, line: int, field: str, problem: str) -> None:
    error = error_of(text)
    assert (error.source, error.line, error.field) == ("mine.yaml", line, field)
    assert problem in error.problem


def test_extends_a_file_relative_to_the_extending_one(tmp_path: Path) -> None:
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "base.yaml").write_text(
        "version: 1\npreset: vllm\nname: team-base\nstages:\n  - {name: queue, limit_ms: 80}\n"
    )
    (tmp_path / "app.yaml").write_text(
        "version: 1\nextends: team/base.yaml\nstages:\n  - {name: prefill, limit_ms: 200}\n"
    )
    budget = load_budget(tmp_path / "app.yaml").budget
    assert (budget.name, budget.preset) == ("team-base", "vllm")
    assert (budget.stage("queue").limit_ms, budget.stage("prefill").limit_ms) == (80, 200)


def test_errors_in_an_extended_file_name_that_file(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("version: 1\npreset: vllm\nstages:\n  - {name: queue, bogus: 1}\n")
    (tmp_path / "app.yaml").write_text("version: 1\nextends: base.yaml\n")
    with pytest.raises(BudgetError) as caught:
        load_budget(tmp_path / "app.yaml")
    assert (caught.value.source, caught.value.line) == (str(base), 4)


def test_a_missing_extended_file_and_a_cycle_fail_on_the_extends_line(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("version: 1\nextends: ./missing.yaml\n")
    with pytest.raises(BudgetError) as caught:
        load_budget(tmp_path / "a.yaml")
    assert (caught.value.line, caught.value.field) == (2, "extends")
    assert "missing.yaml" in caught.value.problem
    (tmp_path / "b.yaml").write_text("version: 1\nextends: ./c.yaml\n")
    (tmp_path / "c.yaml").write_text("version: 1\nextends: b.yaml\n")
    with pytest.raises(BudgetError) as caught:
        load_budget(tmp_path / "b.yaml")
    assert "extends this file again" in caught.value.problem


MARKS = """\
version: 1
name: t
total: {target_ms: 100, limit_ms: 200}
first_token:
%s
stages:
  - {name: llm, target_ms: 50, limit_ms: 100, match: [{name: chat}]}
"""


def test_first_token_marks_parse() -> None:
    budget = parse_budget(
        MARKS
        % """\
  - {attribute: x.ttft, anchor: {child_end: {name: POST, kind: client}}, match: [{kind: client}]}
  - {attribute: y.ttft, anchor: span_start}
  - {event: [a, b], match: [{attributes: {stream: true}}]}
  - {event: First Token Stream Event}"""
    ).budget
    first, second, third, fourth = budget.first_token
    assert first.attribute == "x.ttft"
    assert first.anchor is not None
    assert first.anchor.name == "POST"
    assert first.match[0].kind is SpanKind.CLIENT
    assert second.attribute == "y.ttft"
    assert second.anchor is None
    assert third.events == {"a", "b"}
    assert third.match[0].attributes == {"stream": {"true"}}
    assert fourth.events == {"First Token Stream Event"}
    assert fourth.attribute is None


def test_no_first_token_list_is_the_default() -> None:
    assert parse_budget(MARKS.replace("first_token:\n%s\n", "")).budget.first_token == (
        DEFAULT_FIRST_TOKEN
    )


ONE_OF = "one of `attribute`, `event` or `first_child`"


@pytest.mark.parametrize(
    ("marks", "field", "problem"),
    [
        (
            "  - {anchor: span_start}",
            "first_token[0]",
            "one of `attribute`, `event` or `first_child`",
        ),
        (
            "  - {attribute: a, event: b}",
            "first_token[0]",
            "one of `attribute`, `event` or `first_child`",
        ),
        ("  - {event: b, anchor: span_start}", "first_token[0].anchor", "instant of its own"),
        ("  - {attribute: a, anchor: end}", "first_token[0].anchor", "expected a mapping"),
        ("  - {attribute: a, anchor: {child: {}}}", "first_token[0].anchor.child", "unknown key"),
        ("  - {attribute: a, when: x}", "first_token[0].when", "unknown key"),
        ("  - {event: []}", "first_token[0].event", "empty list"),
        ("  - {event: [1]}", "first_token[0].event", "expected a string"),
        ("  - {attribute: a, match: []}", "first_token[0].match", "empty list"),
        ("  - {attribute: a, match: [{nme: x}]}", "first_token[0].match[0].nme", "unknown key"),
        ("  []", "first_token", "empty list"),
    ],
)
def test_bad_marks_name_the_field(marks: str, field: str, problem: str) -> None:
    error = error_of(MARKS % marks)
    assert (error.line, error.field) == (5, field)
    assert problem in error.problem
