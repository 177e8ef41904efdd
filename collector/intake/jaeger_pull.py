"""One view over many budget collectors: read the traces they forwarded to Jaeger and judge
the ones this collector has not, so that its store, `/api` and web UI cover them all.

Behind a load balancer each collector judges and stores its share of the traces; all of
them forward their traces, annotated, to one Jaeger. A collector started with
`--pull-jaeger URL --pull-service NAME` (and no intake of its own) searches that Jaeger
every `pull_every` seconds for the service's traces of the last `pull_window` seconds and
offers each one it has not seen to its judging core: the same evaluator on the same spans
gives the verdicts the collectors gave live. A trace is taken once its last span ended
`pull_settle` seconds ago, so that it is whole in Jaeger by then.

What it sees is what Jaeger keeps: behind a tail sampler, the sampled traces only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from ..core.held import HeldSpan
from ..core.judging_core import JudgingCore
from ..readers import TraceReadError
from ..sinks.store import VerdictStore
from ..spans import Span
from .settings import PullSettings

__all__ = ["JaegerPull"]

log = logging.getLogger(__name__)

Read = Callable[[str, str, float, int], Sequence[Span]]


class JaegerPull:
    """Polls Jaeger on a thread of its own; `poll` does one round (tests call it)."""

    def __init__(
        self,
        core: JudgingCore,
        store: VerdictStore,
        read: Read,
        *,
        url: str,
        service: str,
        every_s: float,
        window_s: float,
        settle_s: float,
        limit: int,
        memory: int,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._core = core
        self._store = store
        self._read = read
        self.url = url
        self.service = service
        self._every_s = every_s
        self._window_s = window_s
        self._settle_s = settle_s
        self._limit = limit
        self._memory = memory
        self._wall_clock = wall_clock
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jaeger-pull", daemon=True)

    @classmethod
    def from_settings(
        cls,
        settings: PullSettings,
        core: JudgingCore,
        store: VerdictStore,
        read: Read,
        *,
        memory: int,
    ) -> JaegerPull:
        """The pull `settings` describe (their Jaeger and service given)."""
        if settings.jaeger is None or settings.service is None:
            raise ValueError("a pull from Jaeger needs its query address and a service")
        return cls(
            core,
            store,
            read,
            url=settings.jaeger,
            service=settings.service,
            every_s=settings.every_seconds,
            window_s=settings.window_seconds,
            settle_s=settings.settle_seconds,
            limit=settings.limit,
            memory=memory,
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._every_s + 30)

    def poll(self) -> int:
        """Offer every settled trace not judged yet; returns how many were offered."""
        spans = self._read(self.url, self.service, self._window_s, self._limit)
        traces: dict[str, list[Span]] = {}
        for span in spans:
            traces.setdefault(span.trace_id, []).append(span)
        settled_before = (self._wall_clock() - self._settle_s) * 1e9
        offered = 0
        for trace_id, trace in traces.items():
            if trace_id in self._seen or max(s.end_ns for s in trace) > settled_before:
                continue
            if self._store.get(trace_id) is None:
                if not self._core.offer([HeldSpan(span) for span in trace]):
                    break  # the queue is full: the next round offers the rest
                offered += 1
            self._remember(trace_id)
        return offered

    def _remember(self, trace_id: str) -> None:
        self._seen[trace_id] = None
        if len(self._seen) > self._memory:
            self._seen.popitem(last=False)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                offered = self.poll()
            except TraceReadError as exc:
                log.warning("reading Jaeger failed, trying again in %gs: %s", self._every_s, exc)
            else:
                if offered:
                    log.debug("took %d trace(s) from Jaeger", offered)
            self._stop.wait(self._every_s)
