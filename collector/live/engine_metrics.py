"""`--engine-metrics URL`: the collector scrapes the engine's Prometheus metrics (vLLM's
`/metrics`) on a thread of its own, and each verdict carries the engine's state around its
request's arrival (`context.EngineSamples`) and the request's prompt tokens, so that a
prefill overrun reads "3,100-token prompt; 14 waiting".

A failed scrape is logged once per outage, counted, and leaves a gap: the verdicts of
requests that arrived in it carry no engine state rather than a stale one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import httpx

from ..context import EngineSamples, parse_engine_metrics

__all__ = ["EngineScraper"]

log = logging.getLogger(__name__)


class EngineScraper:
    """Scrapes `url` every `every_s` seconds into `samples` until `close`."""

    def __init__(
        self,
        url: str,
        samples: EngineSamples,
        *,
        every_s: float,
        on_failure: Callable[[], None] = lambda: None,
        client: httpx.Client | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.url = url
        self.samples = samples
        self.every_s = every_s
        self._on_failure = on_failure
        self._client = client or httpx.Client(timeout=max(0.2, min(every_s, 2.0)))
        self._clock_ns = clock_ns
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(
            target=self._run, name="spanbudget-engine-scrape", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._client.close()

    def scrape(self) -> bool:
        """One scrape; False (logged once per outage) when it failed."""
        at = self._clock_ns()
        try:
            response = self._client.get(self.url)
            response.raise_for_status()
            state = parse_engine_metrics(response.text)
        except (httpx.HTTPError, ValueError) as exc:
            self._on_failure()
            if not self._failing:
                log.warning("engine metrics at %s unreadable (%s); retrying", self.url, exc)
            self._failing = True
            return False
        if self._failing:
            log.info("engine metrics at %s readable again", self.url)
        self._failing = False
        self.samples.add(at, state)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.scrape()
            self._stop.wait(max(0.0, self.every_s - (time.monotonic() - started)))
