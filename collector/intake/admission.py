"""Admission before decoding: whether a request's spans can fit the intake queue, judged
from its `Content-Length` before its body is read or parsed.

Refusing after a decode wastes the decode: under overload, clients that retry at once
would have the collector parse bodies only to answer 503. So each request is admitted
against the queue's free room less what requests admitted before it (still being read
and decoded) are expected to bring; its own span count is estimated from its size at
the bytes per span that accepted bodies have shown (a moving average). An estimate, not a
promise: the queue's own bound still decides, after decoding, for what slips through.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

__all__ = ["Admission"]

_START_BYTES_PER_SPAN = 200.0  # an OTLP protobuf span of the reference path: 230-260 bytes
_WEIGHT = 0.1  # of each new body in the moving average


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
