"""`check --junit FILE`: the verdicts as JUnit XML, the test report CI systems read.

One test case per trace, named by its trace id, in a suite named by the budget. A trace at
or above `--fail-on` is a failure whose message says its status, time to first token and
the stages to blame with their excess, so the CI's test view reads like `check`'s table;
the others pass. The suite's properties carry each stage's p95 and the SLO share, and a
file that could not be read is an error case of its own, as `check` exits 2 for it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import UTC, datetime

from ..budget.model import Budget
from ..judging.verdict import Status, Verdict
from ..stats import StageSummary, wilson_interval
from .judge import CheckResult, FailOn, fails

__all__ = ["render_junit"]


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} ms"


def _message(verdict: Verdict) -> str:
    """`overrun: TTFT 262.1 ms (limit 250); blame retrieval 71.2 ms > 40`."""
    ttft = f"TTFT {_ms(verdict.ttft_ms)} (limit {verdict.total_limit_ms:g})"
    parts = [f"{verdict.status.value}: {ttft}"]
    stages = {s.name: s for s in verdict.stages}
    # Worst first, as the verdict orders them; a stage blamed for being over its target
    # only (when only the total overran) has no limit to name.
    blamed = [
        f"{name} {_ms(stages[name].ms)} > {stages[name].limit_ms:g}"
        if stages[name].status is Status.OVERRUN
        else f"{name} {_ms(stages[name].ms)}"
        for name in verdict.blame
        if name in stages
    ]
    if blamed:
        parts.append("blame " + ", ".join(blamed))
    return "; ".join(parts)


def _details(verdict: Verdict) -> str:
    lines = [f"trace {verdict.trace_id}: {verdict.status.value}"]
    lines += [
        f"  {s.name}: {_ms(s.ms)} (target {s.target_ms:g}, limit {s.limit_ms:g}) {s.status.value}"
        for s in verdict.stages
    ]
    return "\n".join(lines)


def render_junit(
    result: CheckResult,
    budget: Budget,
    fail_on: FailOn,
    *,
    problems: Sequence[str] = (),
    now: datetime | None = None,
) -> str:
    """The XML text (UTF-8, with its declaration)."""
    verdicts = result.verdicts
    failures = sum(1 for v in verdicts if fails(v, fail_on))
    suite = ET.Element(
        "testsuite",
        {
            "name": f"spanbudget check: budget {budget.name}",
            "tests": str(len(verdicts) + len(problems)),
            "failures": str(failures),
            "errors": str(len(problems)),
            "skipped": str(sum(1 for v in verdicts if not v.status.in_slo)),
            "time": f"{sum((v.ttft_ms or 0.0) for v in verdicts) / 1000:.3f}",
            "timestamp": (now or datetime.now(UTC)).isoformat(timespec="seconds"),
        },
    )
    properties = ET.SubElement(suite, "properties")
    timed = [v for v in verdicts if v.ttft_ms is not None]
    for stage in budget.stages:
        summary = StageSummary.of_times(
            ms for v in timed if (ms := v.stage(stage.name).ms) is not None
        )
        value = "" if summary.p95_ms is None else f"{summary.p95_ms:.1f}"
        ET.SubElement(properties, "property", {"name": f"{stage.name}.p95_ms", "value": value})
    counted = [v for v in verdicts if v.status.in_slo]
    within = sum(1 for v in counted if v.status in (Status.OK, Status.WARN))
    low, high = wilson_interval(within, len(counted))
    for name, value in (
        ("slo.objective", f"{budget.slo_objective:g}"),
        ("slo.within_limits", f"{within / len(counted):.4f}" if counted else ""),
        ("slo.interval", f"{low:.4f}-{high:.4f}"),
        ("traces.skipped", str(result.skipped)),
    ):
        ET.SubElement(properties, "property", {"name": name, "value": value})
    classname = f"spanbudget.{budget.name}"
    for problem in problems:
        case = ET.SubElement(suite, "testcase", {"classname": classname, "name": "input"})
        ET.SubElement(case, "error", {"message": problem, "type": "unreadable"})
    for verdict in verdicts:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": classname,
                "name": verdict.trace_id,
                "time": f"{(verdict.ttft_ms or 0.0) / 1000:.4f}",
            },
        )
        if not verdict.status.in_slo:  # not a request to judge on time to first token
            reason = "no LLM call" if verdict.status is Status.NOT_APPLICABLE else "not streamed"
            ET.SubElement(case, "skipped", {"message": f"{verdict.status.value}: {reason}"})
        elif fails(verdict, fail_on):
            failure = ET.SubElement(
                case, "failure", {"message": _message(verdict), "type": verdict.status.value}
            )
            failure.text = _details(verdict)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
