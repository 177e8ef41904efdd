"""The embedded stack (`spanbudget.stack.Stack`) on free loopback ports, as the end-to-end,
web UI and preset tests start it: the repository's budget, a short decision wait."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from spanbudget.stack import Stack
from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]


def local_stack(
    data: Path,
    logs: Path,
    env: Mapping[str, str],
    collector_args: Sequence[str] = (),
) -> Stack:
    """The three processes on free ports of 127.0.0.1, their data in `data`, logs in `logs`."""
    return Stack(
        data_dir=data,
        budget=REPO / "budget.yaml",
        collector=f"127.0.0.1:{free_port()}",
        engine=f"127.0.0.1:{free_port()}",
        gateway=f"127.0.0.1:{free_port()}",
        decision_wait="0.5s",
        logs=logs,
        env=env,
        collector_args=collector_args,
    )
