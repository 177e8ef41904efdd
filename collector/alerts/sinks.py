"""Where alerts go: Alertmanager's v2 API, a generic JSON webhook, the log.

`Dispatcher` delivers off the collector's worker thread and keeps only the newest state
of each alert per sink, retrying with backoff while a receiver is down, so that the alert
arrives once it is back and nothing piles up meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import httpx

from .engine import Alert

__all__ = ["AlertSink", "AlertmanagerSink", "Dispatcher", "LogSink", "WebhookSink"]

log = logging.getLogger(__name__)


class AlertSink(Protocol):
    """Delivers alerts; raises on failure so the dispatcher retries.

    `takes_resends`: whether the sink also wants the periodic re-sends of a firing alert
    (Alertmanager does: it resolves an alert that is not re-sent); the others get each
    change of state once, firing and resolved.
    """

    name: str
    takes_resends: bool

    def deliver(self, alerts: Sequence[Alert]) -> None: ...

    def close(self) -> None: ...


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class AlertmanagerSink:
    """`POST /api/v2/alerts` with `postableAlerts` (Alertmanager's OpenAPI spec)."""

    name = "alertmanager"
    takes_resends = True

    def __init__(
        self, url: str, *, client: httpx.Client | None = None, resend_s: float = 60.0
    ) -> None:
        self.url = url.rstrip("/") + "/api/v2/alerts"
        self.client = client or httpx.Client(timeout=5.0)
        self.resend_s = resend_s

    def payload(self, alerts: Sequence[Alert]) -> list[dict[str, Any]]:
        items = []
        for alert in alerts:
            # While firing, promise an end a few re-sends ahead, as Prometheus does: should
            # the collector die, Alertmanager resolves the alert by itself.
            ends = alert.ends_at or datetime.now(UTC) + timedelta(seconds=4 * self.resend_s)
            item: dict[str, Any] = {
                "labels": alert.labels(),
                "annotations": alert.annotations(),
                "startsAt": _rfc3339(alert.starts_at),
                "endsAt": _rfc3339(ends),
            }
            if alert.ui_url:
                item["generatorURL"] = alert.ui_url
            items.append(item)
        return items

    def deliver(self, alerts: Sequence[Alert]) -> None:
        self.client.post(self.url, json=self.payload(alerts)).raise_for_status()

    def close(self) -> None:
        self.client.close()


class WebhookSink:
    """A generic JSON webhook: `{"receiver": "spanbudget", "alerts": [...]}`."""

    name = "webhook"
    takes_resends = False

    def __init__(self, url: str, *, client: httpx.Client | None = None) -> None:
        self.url = url
        self.client = client or httpx.Client(timeout=5.0)

    def deliver(self, alerts: Sequence[Alert]) -> None:
        body = {
            "receiver": "spanbudget",
            "alerts": [
                {
                    "status": "resolved" if a.resolved else "firing",
                    "labels": a.labels(),
                    "annotations": a.annotations(),
                    "startsAt": a.starts_at.isoformat(),
                    "endsAt": a.ends_at.isoformat() if a.ends_at else None,
                }
                for a in alerts
            ],
        }
        self.client.post(self.url, json=body).raise_for_status()

    def close(self) -> None:
        self.client.close()


class LogSink:
    name = "log"
    takes_resends = False

    def deliver(self, alerts: Sequence[Alert]) -> None:
        for alert in alerts:
            log.warning(
                "ALERT %s %s %s",
                "RESOLVED" if alert.resolved else "FIRING",
                alert.labels(),
                alert.annotations()["summary"],
            )

    def close(self) -> None:
        pass


class Dispatcher:
    """One thread; per sink, the newest pending state of each alert, retried with backoff."""

    def __init__(
        self,
        sinks: Sequence[AlertSink],
        *,
        on_failure: Callable[[str], None] = lambda sink: None,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
    ) -> None:
        self.sinks = list(sinks)
        self._pending: dict[str, dict[tuple[str, str, str], Alert]] = {s.name: {} for s in sinks}
        self._delay = dict.fromkeys(self._pending, 0.0)
        self._on_failure = on_failure
        self._backoff = (backoff_s, backoff_max_s)
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="alert-sinks", daemon=True)
        self._thread.start()

    def send(self, alert: Alert) -> None:
        with self._wake:
            for sink in self.sinks:
                if alert.resent and not sink.takes_resends:
                    continue
                self._pending[sink.name][alert.key] = alert
            self._wake.notify()

    def pending(self) -> int:
        with self._wake:
            return sum(len(p) for p in self._pending.values())

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and not any(self._pending.values()):
                    self._wake.wait()
                if self._closed and not any(self._pending.values()):
                    return
                work = {name: dict(p) for name, p in self._pending.items() if p}
            wait = 0.0
            for sink in self.sinks:
                batch = work.get(sink.name)
                if not batch:
                    continue
                try:
                    sink.deliver(list(batch.values()))
                except Exception as exc:  # a receiver's failure must never stop the others
                    log.warning("alert sink %s failed (%s); retrying", sink.name, exc)
                    self._on_failure(sink.name)
                    low, high = self._backoff
                    self._delay[sink.name] = min(high, max(low, self._delay[sink.name] * 2))
                    wait = max(wait, self._delay[sink.name])
                    continue
                self._delay[sink.name] = 0.0
                with self._wake:
                    pending = self._pending[sink.name]
                    for key, alert in batch.items():
                        if pending.get(key) is alert:  # not replaced by a newer state meanwhile
                            del pending[key]
            if wait:
                with self._wake:
                    if self._closed:
                        return
                    self._wake.wait(wait)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop after one last attempt at what is pending (bounded by `timeout_s`)."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout_s)
        for sink in self.sinks:
            sink.close()
