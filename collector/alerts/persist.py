"""Where the alert rules' state outlives the process: one small JSON file, replaced whole.

Prometheus keeps `ALERTS_FOR_STATE` in its TSDB so that a restart neither re-arms a
pending rule's `for` nor pages again for an alert that was firing. The alert engine
(`engine.AlertEngine`) does the same through an `AlertStateStore`: it saves a snapshot
of its rules' states and firing alerts whenever one of them changes, and loads it once
at start. The file is written to a temporary name and renamed over the old one, so that
a crash (`kill -9`) leaves the old snapshot or the new one, never half of one.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Protocol

__all__ = ["AlertStateFile", "AlertStateStore"]

log = logging.getLogger(__name__)


class AlertStateStore(Protocol):
    def load(self) -> dict[str, Any] | None: ...

    def save(self, snapshot: dict[str, Any]) -> None: ...


class AlertStateFile:
    """An `AlertStateStore` in one JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any] | None:
        """The last snapshot saved, or None (no file yet, or one that cannot be read)."""
        try:
            document = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("alert state %s unreadable, starting afresh: %s", self.path, exc)
            return None
        return document if isinstance(document, dict) else None

    def save(self, snapshot: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(json.dumps(snapshot, sort_keys=True))
        os.replace(temporary, self.path)
