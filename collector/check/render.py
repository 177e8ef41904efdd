"""`spanbudget check`'s output: the verdicts as JSON, or as a table for people."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from spanbudget.common.terminal import print_wide

from ..budget.model import Budget
from ..context import why
from ..judging.verdict import Status, Verdict
from ..stats import StageSummary
from ..stats.table import StageRow, few_note, has_few, slo_line, stage_table
from .judge import CheckResult

__all__ = ["STATUS_STYLE", "render_json", "render_table", "short_ids", "worst_first"]

WIDE = 140  # columns from which whole trace ids fit beside the stages
MIN_ID = 8  # the shortest part of a trace id a row shows
MAX_PREFIX = 12  # past this, ids that share a prefix show their ends instead

STATUS_STYLE = {
    Status.OK: "green",
    Status.ABSENT: "dim",
    Status.UNMEASURED: "dim",
    Status.WARN: "yellow",
    Status.OVERRUN: "bold red",
    Status.ERROR: "bold magenta",
    Status.INCOMPLETE: "cyan",
    Status.NOT_APPLICABLE: "dim",
    Status.NOT_STREAMED: "dim",
}


def render_json(result: CheckResult) -> str:
    return json.dumps([v.to_dict() for v in result.verdicts], indent=2)


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def worst_first(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The most severe status first, then the longest time to first token."""
    return sorted(verdicts, key=lambda v: (-v.status.severity, -(v.ttft_ms or 0.0), v.trace_id))


def _unique_length(ids: Sequence[str], cut: Callable[[str, int], str], longest: int) -> int:
    width = min(MIN_ID, longest)
    while width < longest and len({cut(t, width) for t in ids}) < len(set(ids)):
        width += 1
    return width


def short_ids(trace_ids: Sequence[str], console_width: int) -> dict[str, str]:
    """What each row shows of its trace id: whole on a wide terminal (searchable in
    Jaeger); else the shortest prefix of at least 8 characters that keeps the ids shown
    apart, or, where ids share a long prefix (`0000…0049`), the shortest such suffix after
    `…`. `--format json` always has them whole."""
    longest = max((len(t) for t in trace_ids), default=0)
    if console_width >= WIDE:
        return {t: t for t in trace_ids}
    prefix = _unique_length(trace_ids, lambda t, n: t[:n], longest)
    if prefix <= MAX_PREFIX:
        return {t: t[:prefix] for t in trace_ids}
    suffix = _unique_length(trace_ids, lambda t, n: t[-n:], longest)
    if suffix >= longest:
        return {t: t for t in trace_ids}
    return {t: "…" + t[-suffix:] for t in trace_ids}


def _blame(verdict: Verdict, *, wide: bool) -> str:
    """Every blamed stage, worst first; on a narrow terminal the worst and how many more
    (`prefill +2`), so that a row keeps to one line."""
    if wide or len(verdict.blame) <= 1:
        return ", ".join(verdict.blame)
    return f"{verdict.blame[0]} +{len(verdict.blame) - 1}"


def _rows_table(
    verdicts: Sequence[Verdict], budget: Budget, ids: Mapping[str, str], *, wide: bool
) -> Table:
    """One row per trace: status, TTFT, each stage's ms coloured by status, blame."""
    table = Table(
        title=f"budget {budget.name}: TTFT target {budget.total_target_ms:g} ms, "
        f"limit {budget.total_limit_ms:g} ms",
        box=box.SIMPLE_HEAD,  # its column divider is one space: no padding besides
        padding=0,
        pad_edge=False,
        show_edge=False,
    )
    table.add_column("trace", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("TTFT", justify="right", no_wrap=True)
    for stage in budget.stages:
        table.add_column(stage.name, justify="right", no_wrap=True)
    # Time no stage claims is usually nil; its column only shows when there is some.
    show_other = any(v.unattributed_ms for v in verdicts)
    if show_other:
        table.add_column("other", justify="right", no_wrap=True)
    table.add_column("blame", min_width=5, overflow="fold")
    table.add_row(
        "",
        "limit",
        f"{budget.total_limit_ms:g}",
        *(f"{stage.limit_ms:g}" for stage in budget.stages),
        *([""] if show_other else []),
        "",
        style="dim",
        end_section=True,
    )
    for verdict in verdicts:
        cells: list[Text | str] = [
            ids[verdict.trace_id],
            Text(verdict.status.value, style=STATUS_STYLE[verdict.status]),
            Text(_ms(verdict.ttft_ms), style=STATUS_STYLE[verdict.total_status]),
        ]
        cells += [Text(_ms(s.ms), style=STATUS_STYLE[s.status]) for s in verdict.stages]
        if show_other:
            cells.append(_ms(verdict.unattributed_ms))
        cells.append(_blame(verdict, wide=wide))
        table.add_row(*cells)
    return table


def _aggregate(verdicts: Sequence[Verdict], budget: Budget, title: str) -> Table:
    """Per stage over every trace, as `loadtest` prints a run. An `incomplete` trace's
    stage times are shares of the whole request, not of a TTFT: left out here as there,
    and so are the traces not judged on TTFT (`not_applicable`, `not_streamed`)."""
    timed = [v for v in verdicts if v.ttft_ms is not None]
    stages = [
        StageRow(
            stage.name,
            stage.target_ms,
            stage.limit_ms,
            StageSummary.of((v.stage(stage.name).ms, v.stage(stage.name).status) for v in timed),
        )
        for stage in budget.stages
    ]
    ttft = StageSummary.of((v.ttft_ms, v.total_status) for v in timed)
    return stage_table(
        title,
        stages,
        StageRow("TTFT", budget.total_target_ms, budget.total_limit_ms, ttft),
        objective=budget.slo_objective,
    )


WHY_ROWS = 5  # overruns explained under the rows table


def _reasons(verdicts: Sequence[Verdict]) -> list[tuple[Verdict, str]]:
    """For the worst overruns whose verdicts carry context: the blamed stage, its excess
    over its limit, and `context.why` (`prefill +31.0 ms: 3,100-token prompt; 14 waiting`)."""
    out: list[tuple[Verdict, str]] = []
    for verdict in verdicts:
        if verdict.status is not Status.OVERRUN or not verdict.blame:
            continue
        context = why(verdict.attributes)
        if not context:
            continue
        stage = verdict.stage(verdict.blame[0])
        over = (stage.ms or 0.0) - (
            stage.limit_ms if stage.status is Status.OVERRUN else stage.target_ms
        )
        out.append((verdict, f"{stage.name} +{over:.1f} ms: {context}"))
        if len(out) == WHY_ROWS:
            break
    return out


def render_table(
    result: CheckResult, budget: Budget, console: Console, *, rows: int | None = None
) -> None:
    """Per budget that judged traces (`budget` and the presets recognition chose; where
    there are several, not one that judged only not_applicable traces): the
    worst `rows` traces (all when None), one row each, then every trace per stage and the
    SLO line; then the counts, which instrumentation judged how many, the requests not
    judged on TTFT, and why traces have no first token. Off a terminal nothing is cut; on
    one, trace ids are cut to prefixes that keep them apart."""
    groups: dict[str, list[Verdict]] = {}
    for verdict in result.verdicts:
        groups.setdefault(verdict.budget, []).append(verdict)
    budgets = {budget.name: budget, **result.budgets}
    if len(groups) > 1:
        # A budget that judged only traces with no LLM call (an app's model list, traced
        # by no library) has nothing to show: the not_applicable count below says them.
        groups = {
            name: verdicts
            for name, verdicts in groups.items()
            if any(v.status is not Status.NOT_APPLICABLE for v in verdicts)
        } or groups
    for name, verdicts in groups.items():
        if len(groups) > 1:
            console.print()
        _budget_section(verdicts, budgets.get(name, budget), console, rows=rows)
    counts: dict[str, int] = {}
    for verdict in result.verdicts:
        counts[verdict.status.value] = counts.get(verdict.status.value, 0) + 1
    order = {status.value: status.severity for status in Status}
    summary = ", ".join(
        f"{counts[status]} {status}" for status in sorted(counts, key=lambda s: order[s])
    )
    console.print(
        f"{len(result.verdicts)} traces judged ({summary or 'none'}); {result.skipped} "
        "skipped (no span matched a stage)"
    )
    for line in _notes(result, budget):
        console.print(line, overflow="fold")


def _budget_section(
    verdicts: Sequence[Verdict], budget: Budget, console: Console, *, rows: int | None
) -> None:
    ordered = worst_first(verdicts)
    shown = ordered if rows is None else ordered[:rows]
    if shown:
        ids = short_ids([v.trace_id for v in shown], console.width)
        wide = console.width >= WIDE
        print_wide(console, _rows_table(shown, budget, ids, wide=wide))
    hidden = len(ordered) - len(shown)
    if hidden:
        console.print(f"{hidden} more traces not shown (--rows N shows N, worst first)")
    reasons = _reasons(shown)
    if reasons:
        ids = short_ids([v.trace_id for v in shown], console.width)
        console.print(
            "the worst overruns' context (prompt tokens; the engine's state, when known):"
        )
        for verdict, text in reasons:
            console.print(f"  {ids[verdict.trace_id]}  {text}", overflow="fold")
    counted = [v for v in verdicts if v.status.in_slo]
    if counted:
        n = len(counted)
        console.print()
        print_wide(console, _aggregate(counted, budget, f"{n} traces per stage"))
        summaries = [StageSummary.of_times(v.ttft_ms for v in counted if v.ttft_ms is not None)]
        if has_few(summaries):
            console.print(few_note(), style="dim")
        within = sum(1 for v in counted if v.status in (Status.OK, Status.WARN))
        console.print(slo_line(within, n, budget.slo_objective, noun="traces"))


def _notes(result: CheckResult, budget: Budget) -> list[str]:
    """What judged the traces, and the traces not judged on time to first token."""
    lines = []
    by: dict[tuple[str | None, str], int] = {}
    for verdict in result.verdicts:
        key = (verdict.instrumentation, verdict.budget)
        by[key] = by.get(key, 0) + 1
    if any(instrumentation for instrumentation, _ in by):
        parts = [
            f"{instrumentation or 'none recognised'} {n} (budget {name})"
            for (instrumentation, name), n in by.items()
        ]
        lines.append("instrumentation: " + ", ".join(parts))
    unstreamed = [v for v in result.verdicts if v.status is Status.NOT_STREAMED]
    if unstreamed:
        times = sorted(v.response_ms for v in unstreamed if v.response_ms is not None)
        spread = (
            f": response {times[len(times) // 2]:.1f} ms median, {times[-1]:.1f} max"
            if times
            else ""
        )
        lines.append(
            f"{len(unstreamed)} not streamed, left out of the TTFT SLO{spread} (a budget's"
            " `non_streamed: judge` judges them whole)"
        )
    inapplicable = sum(1 for v in result.verdicts if v.status is Status.NOT_APPLICABLE)
    if inapplicable:
        lines.append(
            f"{inapplicable} not applicable: no LLM call in the trace (a model list, a"
            " health check), left out of the SLO"
        )
    estimates = sum(
        1 for v in result.verdicts if v.first_token is not None and v.first_token["exact"] is False
    )
    if estimates:
        lines.append(
            f"{estimates} first token(s) are estimates (first_token.exact: false): their mark"
            " is counted from a span's start, not from when the response began (OpenLIT"
            " without its HTTP child: early by the wait for the response headers)"
        )
    lines += [hint.line() for hint in result.no_mark]
    if result.skew_without_hosts is not None:
        lines.append(result.skew_without_hosts.line())
    return lines
