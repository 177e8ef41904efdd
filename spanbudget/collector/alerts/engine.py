"""Alert state per (budget, stage, severity): fire once, re-send while firing, resolve.

`AlertEngine` is a verdict listener of the live collector: it feeds the burn windows,
keeps evidence (recent values for the p95, example trace ids) and hands state changes and
re-sends to a `Dispatcher`, which talks to the sinks off the collector's worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from spanbudget.collector.alerts.burnrate import (
    DEFAULT_RULES,
    TOTAL,
    BurnRule,
    BurnWindows,
    human_duration,
    over_limit,
)
from spanbudget.collector.budget import Budget
from spanbudget.collector.links import jaeger_trace_url, ui_trace_url
from spanbudget.collector.stats import percentile
from spanbudget.collector.verdict import Verdict

__all__ = ["Alert", "AlertEngine", "AlertSettings"]

log = logging.getLogger(__name__)
ALERT_NAME = "SpanbudgetBudgetBurn"
_EXAMPLES = 5
_RECENT_VALUES = 500
_SEEN_TRACES = 100_000


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert's current state, as every sink receives it."""

    budget: str
    stage: str
    severity: str
    rule: BurnRule
    burn_long: float
    burn_short: float
    p95_ms: float | None
    limit_ms: float
    example_trace_ids: tuple[str, ...]
    starts_at: datetime
    ends_at: datetime | None = None  # set when resolved
    ui_url: str = ""
    jaeger_ui: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.budget, self.stage, self.severity)

    @property
    def resolved(self) -> bool:
        return self.ends_at is not None

    def labels(self) -> dict[str, str]:
        return {
            "alertname": ALERT_NAME,
            "budget": self.budget,
            "stage": self.stage,
            "severity": self.severity,
        }

    def trace_links(self) -> list[str]:
        links = []
        for trace_id in self.example_trace_ids:
            links.append(ui_trace_url(self.ui_url, trace_id))
            links.append(jaeger_trace_url(self.jaeger_ui, trace_id))
        return [link for link in links if link]

    def annotations(self) -> dict[str, str]:
        what = "time to first token" if self.stage == TOTAL else f"stage {self.stage}"
        p95 = "n/a" if self.p95_ms is None else f"{self.p95_ms:.1f}"
        long, short = human_duration(self.rule.long_s), human_duration(self.rule.short_s)
        return {
            "summary": f"{self.budget}: {what} burns its error budget {self.burn_short:.1f}x "
            f"({self.severity})",
            "description": f"{what} of budget {self.budget} is over its {self.limit_ms:g} ms limit "
            f"too often: burn rate {self.burn_long:.2f}x over {long} and "
            f"{self.burn_short:.2f}x over {short} (threshold "
            f"{self.rule.factor:g}x); current p95 {p95} ms against the limit {self.limit_ms:g} ms.",
            "burn_rate": f"{self.burn_short:.3f}",
            "burn_rate_long": f"{self.burn_long:.3f}",
            "threshold": f"{self.rule.factor:g}",
            "windows": f"{long}/{short}",
            "p95_ms": p95,
            "limit_ms": f"{self.limit_ms:g}",
            "example_trace_ids": " ".join(self.example_trace_ids),
            "trace_links": " ".join(self.trace_links()),
        }


@dataclass(frozen=True, slots=True)
class AlertSettings:
    rules: Sequence[BurnRule] = DEFAULT_RULES
    window_scale: float = 1.0  # shrink every window, for demos and tests
    min_judged: int = 10  # traces in the short window before a rule may fire
    resend_s: float = 60.0  # re-send firing alerts this often, as Alertmanager expects
    tick_s: float = 1.0  # how often rules are evaluated without new verdicts
    ui_url: str = ""
    jaeger_ui: str = ""


@dataclass
class _Evidence:
    values: dict[str, deque[float]] = field(default_factory=dict)
    examples: dict[str, deque[str]] = field(default_factory=dict)


class AlertEngine:
    """Burn-rate rules over the stream of verdicts; implements the collector's listener."""

    name = "alerts"

    def __init__(
        self,
        budget: Budget,
        send: Callable[[Alert], None],
        settings: AlertSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or AlertSettings()
        self.rules = [rule.scaled(self.settings.window_scale) for rule in self.settings.rules]
        self._send = send
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._firing: dict[tuple[str, str, str], tuple[Alert, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.set_budget(budget)

    def set_budget(self, budget: Budget) -> None:
        """Start over on a (re)loaded budget; firing alerts stay until they resolve."""
        with self._lock:
            self.budget = budget
            self._windows = BurnWindows(budget, self.rules)
            self._evidence = _Evidence()
            self._limits = {s.name: s.limit_ms for s in budget.stages}
            self._limits[TOTAL] = budget.total_limit_ms

    def on_verdicts(self, verdicts: Sequence[Verdict]) -> None:
        now = self._clock()
        with self._lock:
            for verdict in verdicts:
                if verdict.budget != self.budget.name or verdict.trace_id in self._seen:
                    continue  # another budget's, or seen already: never counted twice
                self._seen[verdict.trace_id] = None
                if len(self._seen) > _SEEN_TRACES:
                    self._seen.popitem(last=False)
                self._windows.add(now, verdict)
                self._remember(verdict)
        self.evaluate()

    def _remember(self, verdict: Verdict) -> None:
        values = [(s.name, s.ms) for s in verdict.stages] + [(TOTAL, verdict.ttft_ms)]
        for name, ms in values:
            if ms is not None:
                self._evidence.values.setdefault(name, deque(maxlen=_RECENT_VALUES)).append(ms)
        for name in over_limit(verdict):
            self._evidence.examples.setdefault(name, deque(maxlen=_EXAMPLES)).append(
                verdict.trace_id
            )

    def evaluate(self) -> None:
        """Fire, re-send or resolve every (stage, severity) as the windows now say."""
        now = self._clock()
        outgoing: list[Alert] = []
        with self._lock:
            judged_keys: set[tuple[str, str, str]] = set()
            for stage in self._windows.stages:
                for severity in dict.fromkeys(rule.severity for rule in self.rules):
                    alert = self._matching(now, stage, severity)
                    key = (self.budget.name, stage, severity)
                    judged_keys.add(key)
                    current = self._firing.get(key)
                    if alert is not None:
                        if current is None:
                            self._firing[key] = (alert, now)
                            outgoing.append(alert)
                        elif now - current[1] >= self.settings.resend_s:
                            refreshed = replace(alert, starts_at=current[0].starts_at)
                            self._firing[key] = (refreshed, now)
                            outgoing.append(refreshed)
                    elif current is not None:
                        del self._firing[key]
                        outgoing.append(replace(current[0], ends_at=_utc(now)))
            # A reload renamed the budget or dropped the stage: no rule judges these any
            # more, so resolve them now rather than leave them firing for ever.
            for key in [k for k in self._firing if k not in judged_keys]:
                stale, _ = self._firing.pop(key)
                outgoing.append(replace(stale, ends_at=_utc(now)))
        for alert in outgoing:
            log.warning(
                "%s alert %s/%s: %s",
                "resolved" if alert.resolved else "firing",
                alert.stage,
                alert.severity,
                alert.annotations()["description"],
            )
            self._send(alert)

    def _matching(self, now: float, stage: str, severity: str) -> Alert | None:
        for rule in self.rules:
            if rule.severity != severity:
                continue
            burn_long, _ = self._windows.burn(now, stage, rule.long_s)
            burn_short, judged = self._windows.burn(now, stage, rule.short_s)
            # Rounded as the Prometheus rules round: 0.72 / 0.05 is 14.3999... in floating
            # point, and an exact 14.4x burn must page.
            burning = round(min(burn_long, burn_short), 6) >= rule.factor
            if judged >= self.settings.min_judged and burning:
                values = sorted(self._evidence.values.get(stage, ()))
                return Alert(
                    budget=self.budget.name,
                    stage=stage,
                    severity=severity,
                    rule=rule,
                    burn_long=burn_long,
                    burn_short=burn_short,
                    p95_ms=percentile(values, 95) if values else None,
                    limit_ms=self._limits[stage],
                    example_trace_ids=tuple(self._evidence.examples.get(stage, ())),
                    starts_at=_utc(now),
                    ui_url=self.settings.ui_url,
                    jaeger_ui=self.settings.jaeger_ui,
                )
        return None

    def firing(self) -> list[Alert]:
        """The alerts firing now."""
        with self._lock:
            return [alert for alert, _ in self._firing.values()]

    def start(self) -> None:
        """Evaluate on a timer too, so alerts resolve when overruns (or traffic) stop."""

        def loop() -> None:
            while not self._stop.wait(self.settings.tick_s):
                try:
                    self.evaluate()
                except Exception:
                    log.exception("alert evaluation failed")

        self._thread = threading.Thread(target=loop, name="alert-rules", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)
