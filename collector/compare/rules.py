"""`--fail-on` rules: when a comparison fails a CI build.

    STAGE.STAT>+N UNIT      retrieval.p95>+10%   ttft.p99>+15ms   prefill.over>+2pp
    STAGE.slower            retrieval.slower     any.slower

STAGE is a stage's name, `ttft`, or `any` (every stage and TTFT). STAT is p50, p95 or p99
(UNIT `%` of the base's value, or `ms`) or `over`, the share over the limit (UNIT `pp`,
percentage points). A threshold rule fires when the difference's whole interval lies
above N: the candidate is worse by more than N with the stated confidence, not by chance.
A percentile either side has too few values for (`few`) fires nothing and is reported
as undecided. `STAGE.slower` fires when the stage's verdict is `slower`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import CollectorError
from .bootstrap import Interval
from .comparison import Change, Comparison, StageComparison

__all__ = ["ANY", "Finding", "Rule", "RuleError", "check_rules", "parse_rule"]

ANY = "any"
_UNITS = {"p50": ("%", "ms"), "p95": ("%", "ms"), "p99": ("%", "ms"), "over": ("pp",)}
_THRESHOLD = re.compile(
    r"(?P<stage>[\w.-]+?)\.(?P<stat>p50|p95|p99|over)\s*>\s*\+?(?P<n>\d+(?:\.\d+)?)\s*"
    r"(?P<unit>%|ms|pp)\Z"
)
_SLOWER = re.compile(r"(?P<stage>[\w.-]+?)\.slower\Z")


class RuleError(CollectorError, ValueError):
    """A rule that does not parse, or names a stage neither side has."""


@dataclass(frozen=True, slots=True)
class Rule:
    text: str
    stage: str  # a stage, `ttft` or `any`
    stat: str  # p50, p95, p99, over; or `slower`
    threshold: float = 0.0  # in `unit`
    unit: str = ""


@dataclass(frozen=True, slots=True)
class Finding:
    """What one rule found at one stage: `fired`, or `undecided` (few values)."""

    rule: str
    stage: str
    fired: bool
    undecided: bool
    detail: str


def parse_rule(text: str) -> Rule:
    cleaned = text.strip().replace(" ", "")
    if match := _SLOWER.match(cleaned):
        return Rule(text, match["stage"].lower(), "slower")
    match = _THRESHOLD.match(cleaned)
    if match is None:
        raise RuleError(
            f"--fail-on {text!r}: not STAGE.STAT>+N UNIT (retrieval.p95>+10%, ttft.p99>+15ms, "
            "prefill.over>+2pp) nor STAGE.slower (any.slower)"
        )
    stat, unit = match["stat"], match["unit"]
    if unit not in _UNITS[stat]:
        raise RuleError(f"--fail-on {text!r}: {stat} takes {' or '.join(_UNITS[stat])}")
    return Rule(text, match["stage"].lower(), stat, float(match["n"]), unit)


def _exceeds(rule: Rule, stage: StageComparison) -> Finding:
    stat = stage.stats[rule.stat]
    low = stat.interval.low
    if rule.unit == "%":
        shown = "—" if stat.relative is None else f"{stat.relative * 100:+.1f}%"
        # the interval's low end as a share of the base; nothing is a share of 0
        lowest = None if not stat.base else low / stat.base * 100
    elif rule.unit == "pp":
        shown, lowest = f"{stat.difference * 100:+.1f}pp", low * 100
    else:
        shown, lowest = f"{stat.difference:+.1f}ms", low
    detail = f"{stage.name}.{rule.stat} {shown} (interval {_interval(rule, stat.interval)})"
    if stat.few:
        return Finding(rule.text, stage.name, False, True, detail + ", few values")
    fired = lowest is not None and lowest > rule.threshold
    return Finding(rule.text, stage.name, fired, False, detail)


def _interval(rule: Rule, interval: Interval) -> str:
    if rule.stat == "over":
        return f"{interval.low * 100:+.1f}..{interval.high * 100:+.1f}pp"
    return f"{interval.low:+.1f}..{interval.high:+.1f}ms"


def check_rules(comparison: Comparison, rules: list[Rule]) -> list[Finding]:
    """One finding per rule and stage it covers (`any`: all measured ones). Raises
    RuleError for a rule that names a stage neither side has."""
    findings: list[Finding] = []
    names = [s.name for s in comparison.stages]
    for rule in rules:
        if rule.stage != ANY and rule.stage not in names:
            raise RuleError(
                f"--fail-on {rule.text!r}: no stage {rule.stage!r}; the stages: " + ", ".join(names)
            )
        for stage in comparison.stages:
            if rule.stage not in (ANY, stage.name) or not stage.stats:
                continue
            if rule.stat == "slower":
                fired = stage.change is Change.SLOWER
                detail = f"{stage.name}: {stage.change.value}"
                findings.append(Finding(rule.text, stage.name, fired, False, detail))
            else:
                findings.append(_exceeds(rule, stage))
    return findings
