"""The whole embedded stack on 127.0.0.1: engine emulator, collector and gateway as separate
processes, driven by the real load tester and by `spanbudget demo --exit`."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from spanbudget.app.stack import spanbudget_command
from spanbudget.collector.loadtest.files import read_results

from tests.support import stack as stacks
from tests.support.servers import free_port
from tests.support.stack import corpus_copy, local_stack

REPO = Path(__file__).resolve().parents[2]
ENV = {"HF_HUB_OFFLINE": "1", "OTEL_BSP_SCHEDULE_DELAY": "200", "PYTHONUNBUFFERED": "1"}


@dataclass
class Running:
    gateway: str
    collector: str
    data: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, small_corpus: Path) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("stack")
    env = {**ENV}
    data = corpus_copy(small_corpus, root)
    spec = local_stack(data, root, env)
    collector = spec.collector_url
    with stacks.running(spec.children()):
        yield Running(spec.gateway_url, collector, data)


def test_small_load_test_joins_a_verdict_to_every_request(stack: Running, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = subprocess.run(
        spanbudget_command(
            "loadtest",
            "--target",
            stack.gateway,
            "--collector",
            stack.collector,
            "--requests",
            "20",
            "--rate",
            "4",
            "--run-id",
            "e2e-small",
            "--out",
            str(out),
            "--budget",
            str(REPO / "budget.yaml"),
        ),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    report = json.loads((out / "report.json").read_text())
    results = read_results(out / "requests.csv")
    assert report["requests"] == len(results) == 20
    assert report["errors"] == 0, [r.request.error for r in results if r.request.error]
    assert report["verdicts"]["missing"] == 0
    verdicts = [r.verdict for r in results if r.verdict is not None]
    assert len(verdicts) == 20
    # Every stage of the reference path showed up, and the numbers recompute from the CSV.
    for stage in report["stages"]:
        values = [ms for v in verdicts if (ms := v.stages[stage["name"]].ms) is not None]
        if stage["name"] == "network":
            assert stage["count"] == 20
        assert len(values) == stage["count"]
        if values:
            for q in (50, 90, 95, 99):
                assert stage[f"p{q}_ms"] == pytest.approx(float(np.percentile(values, q)))
            assert stage["max_ms"] == max(values)
    by_name = {s["name"]: s for s in report["stages"]}
    assert by_name["retrieval"]["p50_ms"] > 0
    assert by_name["prefill"]["p50_ms"] > 0
    # Client and trace agree on the time to first token within a few ms (network skew only).
    for joined in results:
        assert joined.verdict is not None
        assert joined.request.ttft_ms is not None
        assert joined.verdict.ttft_ms is not None
        assert abs(joined.request.ttft_ms - joined.verdict.ttft_ms) < 5
    assert (out / "report.html").stat().st_size > 10_000
    again = subprocess.run(
        spanbudget_command("report", str(out)),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert again.returncode == result.returncode
    assert "retrieval" in again.stdout


def demo_command(data: Path, out: Path, ports: list[int], *extra: str) -> list[str]:
    return spanbudget_command(
        "demo",
        *extra,
        "--data-dir",
        str(data),
        "--out",
        str(out),
        "--gateway-listen",
        f"127.0.0.1:{ports[0]}",
        "--engine-listen",
        f"127.0.0.1:{ports[1]}",
        "--collector-listen",
        f"127.0.0.1:{ports[2]}",
    )


def assert_closed(ports: list[int]) -> None:
    for port in ports:
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still open"


def descendants(pid: int) -> dict[int, tuple[str, int]]:
    """Every process below `pid`: its command line and its nice value."""
    found: dict[int, tuple[str, int]] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for tid in os.listdir(f"/proc/{parent}/task"):
            with open(f"/proc/{parent}/task/{tid}/children") as f:
                for child in map(int, f.read().split()):
                    with open(f"/proc/{child}/cmdline", "rb") as cmd:
                        argv = cmd.read().replace(b"\0", b" ").decode()
                    with open(f"/proc/{child}/stat") as stat:
                        nice = int(stat.read().rpartition(")")[2].split()[16])
                    found[child] = (argv, nice)
                    todo.append(child)
    return found


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("demo") / "data"


def test_demo_exit_from_a_fresh_state(demo_data: Path, tmp_path: Path) -> None:
    """`spanbudget demo --exit` on an empty data dir: ingest, start, load, report, stop."""
    out = tmp_path / "run"
    ports = [free_port() for _ in range(3)]
    result = subprocess.run(
        demo_command(demo_data, out, ports, "--exit", "--duration", "12s"),
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert [p["name"] for p in report["phases"]] == ["nominal", "burst"]
    assert report["verdicts"]["missing"] == 0
    assert "web UI" in result.stdout
    assert re.search(r"what to look at: nominal \d+% within limits \(SLO ", result.stdout)
    assert "first run: ingesting the default corpus" in result.stdout
    assert_closed(ports)  # no child outlives the demo


def test_demo_stays_up_until_sigterm_then_stops_its_children(
    demo_data: Path, tmp_path: Path
) -> None:
    """Without --exit the stack stays up after the report; SIGTERM stops every child."""
    ports = [free_port() for _ in range(3)]
    log = tmp_path / "demo.log"
    with log.open("w") as output:
        demo = subprocess.Popen(
            demo_command(demo_data, tmp_path / "run", ports, "--duration", "4s"),
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    try:
        deadline = time.monotonic() + 300
        while "the stack stays up" not in log.read_text():
            assert demo.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        # Still serving after the report: the collector answers its API.
        health = httpx.get(f"http://127.0.0.1:{ports[2]}/healthz", timeout=5)
        assert health.status_code == 200
        below = descendants(demo.pid)
        # The collector, off every request's path, runs at a lower CPU priority; the query
        # model runs in a process of its own under the gateway.
        collector = [nice for argv, nice in below.values() if " collect " in f"{argv} "]
        assert collector == [10], below
        assert any("multiprocessing.spawn" in argv for argv, _ in below.values()), below
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while any(running(pid) for pid in below) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not {pid: below[pid] for pid in below if running(pid)}, "orphans left"
    finally:
        if demo.poll() is None:
            demo.kill()
    assert "stopping" in log.read_text()
    assert "first run" not in log.read_text()  # the corpus from the first run was kept
    assert_closed(ports)
