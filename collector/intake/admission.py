"""Admission before decoding: whether a request's spans can fit the intake queue, judged
from its `Content-Length` before its body is read or parsed; and the senders told to wait,
held when they come back sooner.

Refusing after a decode wastes the decode: under overload, clients that retry at once
would have the collector parse bodies only to answer 503. So each request is admitted
against the queue's free room less what requests admitted before it (still being read
and decoded) are expected to bring; its own span count is estimated from its size at
the bytes per span that accepted bodies have shown (a moving average). An estimate, not a
promise: the queue's own bound still decides, after decoding, for what slips through.

A refusal that reads nothing still costs the interpreter about half a millisecond (the
server's request or call machinery): clients that retry at once, ignoring `Retry-After`,
would be answered as fast as they ask and take the collector's time from the spans it
accepts. So a sender told to wait that comes back sooner is held (`Throttle`): admitted
as soon as it fits, refused only once its wait is over.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable

__all__ = ["Admission", "Throttle"]

_START_BYTES_PER_SPAN = 200.0  # an OTLP protobuf span of the reference path: 230-260 bytes
_WEIGHT = 0.1  # of each new body in the moving average
POLL_SECONDS = 0.05  # how often a held request asks again whether it fits


class Admission:
    """Reserves queue room per request. `admit` on arrival, `settle` once it is decided."""

    def __init__(self, queued: Callable[[], int], capacity: int) -> None:
        self._queued = queued  # spans in the queue now
        self.capacity = capacity
        self._lock = threading.Lock()
        self._reserved = 0  # spans expected from requests admitted and not yet settled
        self.bytes_per_span = _START_BYTES_PER_SPAN

    def admit(self, content_length: int | None, compressed: bool) -> int | None:
        """The spans reserved for this request, or None to refuse it now (503). A body of
        unknown or compressed size reserves nothing (its size says little)."""
        expected = 0
        if content_length and not compressed:
            expected = math.ceil(content_length / self.bytes_per_span)
        with self._lock:
            taken = self._queued() + self._reserved
            if taken >= self.capacity or (taken and taken + expected > self.capacity):
                return None  # an empty queue admits even a body larger than it (413 later)
            self._reserved += expected
        return expected

    def settle(self, reserved: int, body_bytes: int = 0, spans: int = 0) -> None:
        """Release a request's reservation; an accepted plain body teaches its size."""
        with self._lock:
            self._reserved -= reserved
            if body_bytes and spans:
                seen = body_bytes / spans
                self.bytes_per_span += _WEIGHT * (seen - self.bytes_per_span)


class Throttle:
    """The senders told to come back later (503 with `Retry-After`, gRPC's `RetryInfo`) and
    when each may, by address. For the transports, on their event loop.

    `admit` answers a sender that came back sooner, and finds no room, only when its wait
    is over, unless room appears meanwhile: a client that never waits then costs the
    collector one refusal a wait, not one every half millisecond, and still has its
    requests taken as soon as they fit. One that waits as told is never held. At most
    `most_held` requests are held at once (each keeps its connection, and what its client
    sent before the socket's or the stream's window filled); past that, they are refused
    at once.
    """

    def __init__(self, seconds: float, *, most_held: int = 256, most_senders: int = 4096) -> None:
        self.seconds = seconds
        self.most_held = most_held
        self.held = 0  # requests being held now
        self._until: dict[str, float] = {}  # sender -> when it may come back (monotonic)
        self._most_senders = most_senders

    def told(self, sender: str | None) -> None:
        """`sender` was refused and told to wait the throttle's seconds."""
        if sender is None:
            return
        now = time.monotonic()
        if len(self._until) >= self._most_senders:  # forget the senders whose wait is over
            self._until = {s: until for s, until in self._until.items() if until > now}
        if len(self._until) < self._most_senders or sender in self._until:
            self._until[sender] = now + self.seconds

    def early(self, sender: str | None) -> float:
        """How long `sender` should still wait: 0 when it may come now."""
        until = self._until.get(sender) if sender is not None else None
        return max(0.0, until - time.monotonic()) if until is not None else 0.0

    async def admit(
        self, sender: str | None, admit: Callable[[], int | None], at_most: float | None = None
    ) -> int | None:
        """`admit()`'s reservation, or None to refuse; for a sender that came back sooner
        and does not fit, asked again every `POLL_SECONDS` until its wait is over (at most
        `at_most` seconds from now)."""
        reserved = admit()
        wait = self.early(sender) if reserved is None else 0.0
        if at_most is not None:
            wait = min(wait, at_most)
        if wait <= 0 or self.held >= self.most_held:
            return reserved
        self.held += 1
        try:
            end = time.monotonic() + wait
            while (left := end - time.monotonic()) > 0:
                await asyncio.sleep(min(POLL_SECONDS, left))
                reserved = admit()
                if reserved is not None:
                    break
            return reserved
        finally:
            self.held -= 1
