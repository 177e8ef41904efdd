"""Child processes for `spanbudget demo`: start, wait until healthy, stop cleanly, no orphans.

Each child runs in its own process group, so stopping it also stops anything it started;
its output goes to a log file whose tail is shown when it fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from spanbudget.common.errors import SpanbudgetError

__all__ = ["Child", "ChildFailed", "Supervisor"]


class ChildFailed(SpanbudgetError, RuntimeError):
    """A child exited or did not become healthy in time."""


@dataclass
class Child:
    name: str
    argv: Sequence[str]
    health_url: str
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class Supervisor:
    """Starts children in order and stops them in reverse order."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def start(self, child: Child) -> None:
        child.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = child.log_path.open("ab")
        try:
            child.process = subprocess.Popen(
                list(child.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **child.env},
                start_new_session=True,
            )
        finally:
            log.close()
        self.children.append(child)

    def wait_healthy(self, child: Child, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        assert child.process is not None
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = child.process.poll()
                if code is not None:
                    raise ChildFailed(
                        f"{child.name} exited with code {code}; log {child.log_path}:\n"
                        f"{child.log_tail()}"
                    )
                try:
                    if client.get(child.health_url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise ChildFailed(
                        f"{child.name} not healthy at {child.health_url} after {timeout_s:g} s; "
                        f"log {child.log_path}:\n{child.log_tail()}"
                    )
                time.sleep(0.2)

    def check_alive(self) -> None:
        for child in self.children:
            if child.process is not None and child.process.poll() is not None:
                raise ChildFailed(
                    f"{child.name} exited with code {child.process.returncode}:\n{child.log_tail()}"
                )

    def stop_all(self, grace_s: float = 10.0) -> None:
        """SIGTERM each child's process group (newest first), then SIGKILL stragglers."""
        for child in reversed(self.children):
            if child.process is not None and child.process.poll() is None:
                _signal_group(child.process, signal.SIGTERM)
                try:
                    child.process.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    _signal_group(child.process, signal.SIGKILL)
                    child.process.wait(timeout=5)
        self.children.clear()


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
