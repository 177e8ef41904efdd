"""The engine's state over time, from its Prometheus metrics: how many requests waited and
ran, and how full its KV cache was, at each scrape. vLLM's metric names (V1; its V0 name
for the KV cache too); a metric with several label sets (models, engines) is summed.

`EngineSamples` keeps the recent scrapes in time order for one question: what was the
state when a request arrived? The newest scrape at or before that time, if it is not
older than `max_age_ns` (a request that arrived during an outage of the scrape gets
nothing rather than a stale number).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["ENGINE_ATTRIBUTES", "EngineSamples", "parse_engine_metrics"]

# vLLM's metric -> the verdict attribute that carries its value around the arrival.
ENGINE_ATTRIBUTES: Mapping[str, str] = {
    "vllm:num_requests_waiting": "engine.num_requests_waiting",
    "vllm:num_requests_running": "engine.num_requests_running",
    "vllm:kv_cache_usage_perc": "engine.kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "engine.kv_cache_usage",  # V0's name
}


def parse_engine_metrics(text: str) -> dict[str, float]:
    """The engine's state in a `/metrics` page, by verdict attribute; what the page does not
    hold is left out. Raises ValueError on a page that is not the text format."""
    state: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            attribute = ENGINE_ATTRIBUTES.get(sample.name)
            if attribute is not None:
                state[attribute] = state.get(attribute, 0.0) + float(sample.value)
    return state


class EngineSamples:
    """Scrapes in time order, at most `keep` of them; safe to add from one thread while
    another reads."""

    def __init__(self, keep: int, max_age_ns: int) -> None:
        self.keep = keep
        self.max_age_ns = max_age_ns
        self._times: list[int] = []
        self._states: list[Mapping[str, float]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._times)

    def add(self, at_ns: int, state: Mapping[str, float]) -> None:
        """One scrape; one older than the newest is dropped (the clock stepped back)."""
        with self._lock:
            if self._times and at_ns < self._times[-1]:
                return
            self._times.append(at_ns)
            self._states.append(dict(state))
            if len(self._times) > 2 * self.keep:  # trimmed in bulk: amortised O(1)
                del self._times[: -self.keep]
                del self._states[: -self.keep]

    def at(self, at_ns: int) -> tuple[Mapping[str, float], int] | None:
        """The state at `at_ns` and how old its scrape was then (ns), or None."""
        with self._lock:
            index = bisect.bisect_right(self._times, at_ns) - 1
            if index < 0:
                return None
            age = at_ns - self._times[index]
            if age > self.max_age_ns:
                return None
            return self._states[index], age
