"""Durations as people write them on a command line: `500ms`, `2s`, `15m`, `1h`, `3d`;
and the `since` bound the HTTP API and the web UI take, a duration ago or a time."""

from __future__ import annotations

import re
import time
from datetime import datetime

__all__ = ["parse_duration", "parse_since"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*\Z")


def parse_duration(text: str) -> float:
    """Seconds in `text`; a bare number is seconds. Raises ValueError with an example."""
    match = _PATTERN.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (examples: 500ms, 2s, 15m, 1h)")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def parse_since(text: str) -> float:
    """`15m` (that long ago) or an RFC 3339 time, as Unix seconds, never before the epoch
    (`99999999999d` means everything, not a date no clock can show) and never after now
    (nothing is judged later than now: `9999-12-31T23:59:59` bounds what has been, and a
    window drawn from it stays within the clock's years); raises ValueError with the
    message an HTTP 400 gives."""
    now = time.time()
    try:
        return max(now - parse_duration(text), 0.0)
    except ValueError:
        pass
    try:
        return min(max(datetime.fromisoformat(text).timestamp(), 0.0), now)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"since: not a duration (15m) or RFC 3339 time: {text!r}") from None
