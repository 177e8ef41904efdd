"""Alerts per (budget, stage, severity): pending, fire once, re-send while firing, resolve.

`AlertEngine` is a verdict listener of the live collector: it feeds the burn windows,
steps each rule's pending/firing state, keeps evidence (recent values for the p95,
example trace ids) and hands state changes and re-sends to a `Dispatcher`, which talks to
the sinks off the collector's worker thread.

Across a restart (`restore`), the windows are refilled from the stored verdicts and the
rules' states and firing alerts come back from an `persist.AlertStateStore`, as
Prometheus restores `ALERTS_FOR_STATE`: a firing alert stays the same alert (same
`startsAt`, re-sent, never paged again), a pending rule keeps its `for` clock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from copy import copy
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from ..budget.model import Budget
from ..judging.verdict import Verdict
from ..links import jaeger_trace_url, ui_trace_url
from ..stats import percentile
from .burnrate import (
    DEFAULT_RULES,
    TOTAL,
    BurnRule,
    BurnWindows,
    WindowBurn,
    human_duration,
    over_limit,
)
from .persist import AlertStateStore
from .state import RuleState, RuleStatus, RuleTrack

__all__ = ["Alert", "AlertEngine", "AlertSettings", "RuleState", "RuleStatus"]

log = logging.getLogger(__name__)
ALERT_NAME = "SpanbudgetBudgetBurn"
_EXAMPLES = 5
_RECENT_VALUES = 500
_SEEN_TRACES = 100_000
_STATE_VERSION = 1


@dataclass
class _Evidence:
    values: dict[str, deque[float]] = field(default_factory=dict)
    examples: dict[str, deque[tuple[float, str]]] = field(default_factory=dict)  # (at, id)


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
    resent: bool = False  # a re-send of a firing alert, no change of state
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
            "for": human_duration(self.rule.for_s),
            "p95_ms": p95,
            "limit_ms": f"{self.limit_ms:g}",
            "example_trace_ids": " ".join(self.example_trace_ids),
            "trace_links": " ".join(self.trace_links()),
        }


@dataclass(frozen=True, slots=True)
class AlertSettings:
    rules: Sequence[BurnRule] = DEFAULT_RULES
    window_scale: float = 1.0  # every window, `for` and hold times this, for demos and tests
    min_judged: int = 10  # judged traces in each of a rule's two windows before it burns
    min_overruns: int = 5  # traces over the limit in each window before it burns
    resend_s: float = 60.0  # re-send firing alerts this often, as Alertmanager expects
    tick_s: float = 1.0  # how often rules are evaluated without new verdicts
    ui_url: str = ""
    jaeger_ui: str = ""


class AlertEngine:
    """Burn-rate rules over the stream of verdicts; implements the collector's listener.

    Each (stage, rule) has its own pending/firing state (`state.RuleTrack`). What goes to
    the sinks is one alert per (budget, stage, severity), as the workbook ORs its two page
    rules into one page: it fires when the first of that severity's rules fires, and
    resolves when none of them fires or is pending any more. A trace counts once, as first
    judged: a verdict delivered again (late spans, a re-sent trace) changes nothing.
    """

    name = "alerts"

    def __init__(
        self,
        budget: Budget,
        send: Callable[[Alert], None],
        settings: AlertSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
        state: AlertStateStore | None = None,
    ) -> None:
        self.settings = settings or AlertSettings()
        self._state = state
        self._saved: dict[str, Any] | None = None  # the snapshot last handed to `state`
        self._save_lock = threading.Lock()
        self.rules = [rule.scaled(self.settings.window_scale) for rule in self.settings.rules]
        self._by_severity: dict[str, list[int]] = {}  # rule indexes, in rule order
        for i, rule in enumerate(self.rules):
            self._by_severity.setdefault(rule.severity, []).append(i)
        self._send = send
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._firing: dict[tuple[str, str, str], tuple[Alert, float]] = {}
        self._tracks: dict[tuple[str, int], RuleTrack] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.budget = budget
        self.set_budget(budget)

    def set_budget(self, budget: Budget) -> None:
        """Start the windows over on a (re)loaded budget.

        Under the same budget name, each surviving stage keeps its rules' states, so a
        firing page rides out the reload within its hold instead of resolving and firing
        again; under a new name every rule starts inactive (and the old alerts resolve).
        """
        with self._lock:
            renamed = self.budget.name != budget.name
            self.budget = budget
            self._windows = BurnWindows(budget, self.rules)
            self._evidence = _Evidence()
            self._limits = {s.name: s.limit_ms for s in budget.stages}
            self._limits[TOTAL] = budget.total_limit_ms
            old = {} if renamed else self._tracks
            self._tracks = {
                (stage, i): old.get((stage, i)) or RuleTrack(rule)
                for stage in self._windows.stages
                for i, rule in enumerate(self.rules)
            }

    @property
    def history_s(self) -> float:
        """How far back the rules look: the verdicts `restore` wants after a restart."""
        return self._windows.longest_s

    def restore(self, judged: Iterable[tuple[float, str, frozenset[str]]]) -> None:
        """Before the first verdict: refill the windows from `judged` (when, trace id, what
        went over its limit; oldest first, the store's `judged_since`), then take back the
        rules' states and firing alerts of the saved snapshot, if it is of this budget and
        these rules. Nothing is sent here; the next evaluation re-sends or resolves."""
        now = self._clock()
        with self._lock:
            horizon = now - self._windows.longest_s
            for at, trace_id, over in judged:
                if at < horizon or trace_id in self._seen:
                    continue
                self._seen[trace_id] = None
                self._windows.add_over(at, over)
            if len(self._seen) > _SEEN_TRACES:
                for _ in range(len(self._seen) - _SEEN_TRACES):
                    self._seen.popitem(last=False)
            saved = self._state.load() if self._state is not None else None
            if saved is None or not self._restorable(saved):
                return
            for stage, i, state, since, under_since in saved["tracks"]:
                track = self._tracks.get((stage, i))
                if track is not None:
                    track.state = RuleState(state)
                    track.since, track.under_since = since, under_since
            for entry in saved["firing"]:
                stage, i = entry["stage"], entry["rule"]
                if (stage, i) not in self._tracks:
                    continue
                rule = self.rules[i]
                alert = Alert(
                    budget=self.budget.name,
                    stage=stage,
                    severity=rule.severity,
                    rule=rule,
                    burn_long=entry["burn_long"],
                    burn_short=entry["burn_short"],
                    p95_ms=None,
                    limit_ms=self._limits[stage],
                    example_trace_ids=(),
                    starts_at=_utc(entry["starts_at"]),
                    ui_url=self.settings.ui_url,
                    jaeger_ui=self.settings.jaeger_ui,
                )
                self._firing[alert.key] = (alert, now)
            self._saved = saved
        log.info(
            "alert state restored: %d firing alert(s), %d rule(s) pending or firing",
            len(saved["firing"]),
            len(saved["tracks"]),
        )

    def _restorable(self, saved: dict[str, Any]) -> bool:
        if saved.get("version") != _STATE_VERSION or saved.get("budget") != self.budget.name:
            return False
        if saved.get("rules") != [asdict(rule) for rule in self.rules]:
            log.info("alert rules changed since the saved state: starting them afresh")
            return False
        return True

    def _snapshot(self) -> dict[str, Any]:
        """What `restore` needs to carry the rules on; under the lock."""
        return {
            "version": _STATE_VERSION,
            "budget": self.budget.name,
            "rules": [asdict(rule) for rule in self.rules],
            "tracks": [
                [stage, i, track.state.value, track.since, track.under_since]
                for (stage, i), track in self._tracks.items()
                if track.state is not RuleState.INACTIVE
            ],
            "firing": [
                {
                    "stage": alert.stage,
                    "rule": self.rules.index(alert.rule),
                    "starts_at": alert.starts_at.timestamp(),
                    "burn_long": alert.burn_long,
                    "burn_short": alert.burn_short,
                }
                for alert, _ in self._firing.values()
            ],
        }

    def _save(self, snapshot: dict[str, Any]) -> None:
        """Hand a changed snapshot to the state store (never raises: alerts go on)."""
        if self._state is None:
            return
        with self._save_lock:
            if snapshot == self._saved:
                return
            try:
                self._state.save(snapshot)
            except OSError:
                log.exception("saving the alert state failed")
                return
            self._saved = snapshot

    def on_verdicts(self, verdicts: Sequence[Verdict]) -> None:
        now = self._clock()
        with self._lock:
            counted = 0
            overs: list[str] = []  # each name once for each trace over its limit
            values: dict[str, list[float]] = {}
            examples: dict[str, list[tuple[float, str]]] = {}
            for verdict in verdicts:
                if verdict.budget != self.budget.name or verdict.trace_id in self._seen:
                    continue  # another budget's, or seen already: never counted twice
                if verdict.damaged:
                    continue  # it lost spans: its stages cannot be held to their limits
                if not verdict.status.in_slo:
                    continue  # not judged on time to first token: no LLM call, or no stream
                self._seen[verdict.trace_id] = None
                if len(self._seen) > _SEEN_TRACES:
                    self._seen.popitem(last=False)
                counted += 1
                over = over_limit(verdict)
                overs += over
                for stage in verdict.stages:
                    if stage.ms is not None:
                        values.setdefault(stage.name, []).append(stage.ms)
                if verdict.ttft_ms is not None:
                    values.setdefault(TOTAL, []).append(verdict.ttft_ms)
                for name in over:
                    examples.setdefault(name, []).append((now, verdict.trace_id))
            if counted:  # the batch at once: the windows count it as one trace at a time
                self._windows.add_over(now, overs, counted)
                self._remember(values, examples)
        self.evaluate()

    def _remember(
        self, values: dict[str, list[float]], examples: dict[str, list[tuple[float, str]]]
    ) -> None:
        """Keep the verdicts' measured times and, for what went over its limit, their trace
        ids (with when): the evidence an alert shows."""
        for name, measured in values.items():
            self._evidence.values.setdefault(name, deque(maxlen=_RECENT_VALUES)).extend(measured)
        for name, found in examples.items():
            self._evidence.examples.setdefault(name, deque(maxlen=_EXAMPLES)).extend(found)

    def _burning(self, rule: BurnRule, long: WindowBurn, short: WindowBurn) -> bool:
        settings = self.settings
        # Rounded as the Prometheus rules round: 0.72 / 0.05 is 14.3999... in floating
        # point, and an exact 14.4x burn must page.
        return (
            round(min(long.burn, short.burn), 6) >= rule.factor
            and min(long.judged, short.judged) >= settings.min_judged
            and min(long.over, short.over) >= settings.min_overruns
        )

    def evaluate(self) -> None:
        """Step every rule on every stage, then fire, re-send or resolve their alerts."""
        now = self._clock()
        outgoing: list[Alert] = []
        with self._lock:
            judged_keys: set[tuple[str, str, str]] = set()
            for stage in self._windows.stages:
                for i, rule in enumerate(self.rules):
                    long = self._windows.burn(now, stage, rule.long_s)
                    short = self._windows.burn(now, stage, rule.short_s)
                    self._tracks[(stage, i)].step(
                        now, long, short, self._burning(rule, long, short)
                    )
                for severity in self._by_severity:
                    key = (self.budget.name, stage, severity)
                    judged_keys.add(key)
                    current = self._firing.get(key)
                    alert = self._alert(now, stage, severity, handover=current is not None)
                    if alert is not None:
                        if current is None:
                            self._firing[key] = (alert, now)
                            outgoing.append(alert)
                        elif now - current[1] >= self.settings.resend_s:
                            refreshed = replace(alert, starts_at=current[0].starts_at, resent=True)
                            self._firing[key] = (refreshed, now)
                            outgoing.append(refreshed)
                    elif current is not None:
                        del self._firing[key]
                        outgoing.append(replace(current[0], ends_at=_utc(now), resent=False))
            # A reload renamed the budget or dropped the stage: no rule judges these any
            # more, so resolve them now rather than leave them firing for ever.
            for key in [k for k in self._firing if k not in judged_keys]:
                stale, _ = self._firing.pop(key)
                outgoing.append(replace(stale, ends_at=_utc(now), resent=False))
            snapshot = self._snapshot() if self._state is not None else None
        if snapshot is not None:
            self._save(snapshot)
        for alert in outgoing:
            log.log(
                logging.DEBUG if alert.resent else logging.WARNING,
                "%s alert %s/%s: %s",
                "resolved" if alert.resolved else "re-sending" if alert.resent else "firing",
                alert.stage,
                alert.severity,
                alert.annotations()["description"],
            )
            self._send(alert)

    def _alert(self, now: float, stage: str, severity: str, *, handover: bool) -> Alert | None:
        """The alert of the first firing rule of `severity` on `stage`, if one fires.

        With `handover` (the alert fires now), a rule of that severity that is pending
        keeps it up too: when the fast page's short window has moved past a burst that
        the slow page's windows still see, the page is handed over rather than resolved
        and fired again once the slow rule's `for` is up.
        """
        tracks = [(self.rules[i], self._tracks[(stage, i)]) for i in self._by_severity[severity]]
        states = (RuleState.FIRING, RuleState.PENDING) if handover else (RuleState.FIRING,)
        for state in states:
            chosen = next(((r, t) for r, t in tracks if t.state is state), None)
            if chosen is None:
                continue
            rule, track = chosen
            values = sorted(self._evidence.values.get(stage, ()))
            return Alert(
                budget=self.budget.name,
                stage=stage,
                severity=severity,
                rule=rule,
                burn_long=track.long.burn,
                burn_short=track.short.burn,
                p95_ms=percentile(values, 95) if values else None,
                limit_ms=self._limits[stage],
                example_trace_ids=self._examples(now, stage, rule),
                starts_at=_utc(now),
                ui_url=self.settings.ui_url,
                jaeger_ui=self.settings.jaeger_ui,
            )
        return None

    def _examples(self, now: float, stage: str, rule: BurnRule) -> tuple[str, ...]:
        """The latest traces over the limit that are still inside the rule's long window."""
        recent = self._evidence.examples.get(stage, ())
        return tuple(trace_id for at, trace_id in recent if now - at <= rule.long_s)

    def firing(self) -> list[Alert]:
        """The alerts firing now."""
        with self._lock:
            return [alert for alert, _ in self._firing.values()]

    def rule_states(self) -> list[RuleStatus]:
        """Every rule on every stage as of the last evaluation, in budget and rule order."""
        now = self._clock()
        with self._lock:
            return [
                RuleStatus(
                    budget=self.budget.name,
                    stage=stage,
                    track=copy(self._tracks[(stage, i)]),
                    trace_ids=self._examples(now, stage, rule),
                )
                for stage in self._windows.stages
                for i, rule in enumerate(self.rules)
            ]

    def start(self) -> None:
        """Evaluate on a timer too, so that rules move on when overruns (or traffic) stop."""

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
