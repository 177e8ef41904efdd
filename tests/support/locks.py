"""One installer at a time: the test workers that pytest-xdist starts (and two test runs on
one machine) share apt, the instrumented venvs and playwright-core, and two of them asking
at once must neither race one installer against another nor build the same thing twice."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["MACHINE_LOCKS", "exclusive"]

# For what the whole machine shares (apt's packages); a checkout's own installs lock a file
# beside what they install.
MACHINE_LOCKS = Path.home() / ".cache" / "spanbudget" / "locks"


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on `lock_file` (created if missing) until the block ends.

    A waiter blocks until the holder is done, then checks again whether the thing is there:
    the lock is released by the kernel when its holder dies, so a killed run blocks no one.
    """
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
