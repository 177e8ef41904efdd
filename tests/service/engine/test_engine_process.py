"""`spanbudget engine` as a real process, stopped as the demo and a terminal stop it: a
SIGTERM or a Ctrl-C to its whole process group is a clean stop, not an engine crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.servers import free_port

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_process_group_stops_it_cleanly(
    signum: signal.Signals, tmp_path: Path
) -> None:
    port = free_port()
    log_path = tmp_path / "engine.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPANBUDGET_", "OTEL_"))}
    command = [sys.executable, "-c", "from spanbudget.app.cli import main; main()", "engine",
               "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command,
            env={**env, "HF_HUB_OFFLINE": "1", "OTEL_SDK_DISABLED": "true"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own, as the demo starts it
        )
        try:
            deadline = time.monotonic() + 90
            while True:
                assert process.poll() is None, log_path.read_text()[-3000:]
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).is_success:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the engine did not start in 90 s"
                time.sleep(0.2)
            os.killpg(process.pid, signum)  # the core process is in the group too
            assert process.wait(timeout=30) == 0, log_path.read_text()[-3000:]
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    output = log_path.read_text()
    assert "ERROR" not in output, output[-3000:]
    assert "engine core process ended" not in output
