"""`spanbudget compare`: a thin command over `collector.compare`; errors become exit 2."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from spanbudget.common.commands import OutputFormat, usage_error
from spanbudget.common.terminal import make_console, print_notices

from ..options import FormatOption

if TYPE_CHECKING:
    from ..budget.model import Budget
    from .samples import Side

__all__ = ["compare"]

SIDE_HELP = (
    "A load-test run folder (it holds requests.csv), trace files or a folder of them, or "
    "with --collector a run id or a window SINCE..UNTIL (2h..1h, or RFC 3339 times)."
)


def _budget_loader(budget: Path | None, preset: str | None) -> Budget:
    """The budget trace files are judged against, found as `check` finds it."""
    from ..budget.choice import BudgetChoiceError, choose_budget

    try:
        chosen = choose_budget(budget, preset)
    except BudgetChoiceError as exc:
        raise usage_error(str(exc)) from None
    print_notices(chosen.described, chosen.loaded.warnings)
    return chosen.loaded.budget


def _side(
    label: str,
    spec: str,
    collector: str | None,
    phase: str | None,
    load: Callable[[], Budget],
) -> Side:
    from .sources import SideError, collector_side, path_side

    try:
        if collector is not None:
            side = collector_side(label, spec, collector, phase=phase)
        else:
            side = path_side(label, Path(spec), load, phase=phase)
    except SideError as exc:
        raise usage_error(f"{label}: {exc}") from None
    if not side.samples:
        where = f" in phase {phase!r}" if phase else ""
        raise usage_error(f"{label}: {spec}: no request with a timed verdict{where}")
    return side


def compare(
    base: Annotated[str, typer.Argument(help="The side compared against. " + SIDE_HELP)],
    candidate: Annotated[str, typer.Argument(help="The side under test. " + SIDE_HELP)],
    collector: Annotated[
        str | None,
        typer.Option(help="Read both sides from this collector's verdicts (its base URL)."),
    ] = None,
    phase: Annotated[
        str | None,
        typer.Option(help="Compare one phase of load-test runs only (main, nominal, burst)."),
    ] = None,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            help="Exit 1 when this rule fires (repeatable; default any.slower): "
            "STAGE.STAT>+N UNIT with STAT p50/p95/p99 (UNIT % or ms) or over (pp), "
            "or STAGE.slower; STAGE a stage, ttft or any. E.g. retrieval.p95>+10%."
        ),
    ] = None,
    output: FormatOption = OutputFormat.TABLE,
    html: Annotated[
        Path | None, typer.Option(help="Also write a page with both distributions per stage.")
    ] = None,
    confidence: Annotated[
        float,
        typer.Option(help="Of the verdicts, for all stages together (0.5..0.999)."),
    ] = 0.95,
    statistic: Annotated[
        str, typer.Option(help="The statistic a stage's verdict rests on: p50, p95 or p99.")
    ] = "p50",
    min_effect_ms: Annotated[
        float, typer.Option(help="The smallest change called one, in ms.")
    ] = 2.0,
    min_effect: Annotated[
        float, typer.Option(help="The smallest change called one, in % of the base's value.")
    ] = 10.0,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 2000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    budget: Annotated[
        Path | None,
        typer.Option(help="For trace files: the allocation table (default ./budget.yaml)."),
    ] = None,
    preset: Annotated[
        str | None, typer.Option(help="For trace files: judge against this packaged preset.")
    ] = None,
) -> None:
    """Compare two runs, trace sets or collector windows stage by stage: did a stage get
    slower?

    Per stage and for TTFT: p50, p95, p99 of the exclusive time and the share over the
    limit, both sides, the difference and its bootstrap interval over requests; and a
    verdict per stage (slower, faster, no detectable change) resting on --statistic: its
    whole interval, at --confidence for all stages together, must lie beyond the minimum
    effect (--min-effect-ms and --min-effect % of the base). See docs/compare.md.

    Exit 0 when no --fail-on rule fires, 1 when one does, 2 on bad input.

    Example:

        spanbudget compare runs/before runs/after --fail-on 'retrieval.p95>+10%'

        spanbudget compare old-traces/ new-traces/ --format json

        spanbudget compare run-a run-b --collector http://127.0.0.1:4318 --html compare.html

        spanbudget compare 2h..1h 1h.. --collector http://127.0.0.1:4318 --phase burst
    """
    from . import (
        CompareSettings,
        RuleError,
        check_rules,
        parse_rule,
        render_html,
        render_terminal,
    )
    from . import compare as run_compare

    try:
        settings = CompareSettings(
            confidence=confidence,
            resamples=resamples,
            seed=seed,
            primary=statistic,
            min_effect_ms=min_effect_ms,
            min_effect_share=min_effect / 100,
        )
        rules = [parse_rule(text) for text in (fail_on or ["any.slower"])]
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    loaded: list[Budget] = []

    def load() -> Budget:  # once for both sides: one budget, said once
        if not loaded:
            loaded.append(_budget_loader(budget, preset))
        return loaded[0]

    a = _side("base", base, collector, phase, load)
    b = _side("candidate", candidate, collector, phase, load)
    comparison = run_compare(a, b, settings)
    try:
        findings = check_rules(comparison, rules)
    except RuleError as exc:
        raise usage_error(str(exc)) from None
    fired = any(f.fired for f in findings)
    if output is OutputFormat.JSON:
        document = {
            **comparison.to_dict(),
            "rules": [
                {"rule": f.rule, "stage": f.stage, "fired": f.fired, "undecided": f.undecided}
                for f in findings
            ],
            "passed": not fired,
        }
        typer.echo(json.dumps(document, indent=2))
    else:
        render_terminal(comparison, make_console(), findings)
    if html is not None:
        try:
            html.write_text(render_html(comparison, findings))
        except OSError as exc:
            raise usage_error(f"--html: {exc}") from None
    raise typer.Exit(1 if fired else 0)
