"""CPU priority of the thread that keeps step time: a GPU does not wait for a free core.

The engine core only schedules and sleeps, a fraction of a millisecond of CPU per step, but
when it wakes on a busy machine (frontend, load generator and the rest sharing two cores)
it may wait milliseconds for a core, and every step runs that much late. With
`"realtime"` the step thread asks Linux for SCHED_FIFO at the lowest real-time priority,
so that it runs as soon as its sleep ends, ahead of ordinary work; real-time threads of
the kernel still come first, and the kernel's real-time throttling (95 % of a core by
default) bounds it if it ever failed to sleep. Without the right (root, CAP_SYS_NICE, or an
RLIMIT_RTPRIO of at least 1, e.g. `ulimit -r 1` or Compose's `ulimits: {rtprio: 1}`),
or off Linux, the thread stays at normal priority and the description says why.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

__all__ = ["CorePriority", "SetScheduler", "request_core_priority"]

CorePriority = Literal["realtime", "normal"]

# os.sched_setscheduler's shape: (pid, policy, param); pid 0 is the calling thread on Linux.
SetScheduler = Callable[[int, int, "os.sched_param"], None]

_REALTIME_PRIORITY = 1  # the lowest: above every ordinary thread, below the kernel's own


def request_core_priority(priority: CorePriority, set_scheduler: SetScheduler | None = None) -> str:
    """Apply `priority` to the calling thread; return what it now runs at, for the log.

    Never raises for a refusal: an emulator at normal priority still works, only less
    precisely on a busy machine.
    """
    if priority == "normal":
        return "normal priority (asked for)"
    setter = set_scheduler or getattr(os, "sched_setscheduler", None)
    if setter is None or not hasattr(os, "SCHED_FIFO"):
        return "normal priority (real-time scheduling is not available on this system)"
    try:
        setter(0, os.SCHED_FIFO, os.sched_param(_REALTIME_PRIORITY))
    except PermissionError:
        return (
            "normal priority (SCHED_FIFO refused: needs root, CAP_SYS_NICE or rtprio >= 1; "
            "steps may run late on a busy machine)"
        )
    except OSError as exc:
        return f"normal priority (SCHED_FIFO failed: {exc.strerror or exc})"
    return f"SCHED_FIFO priority {_REALTIME_PRIORITY}"
