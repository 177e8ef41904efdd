"""Fixtures for the preset tests: the engine emulator and an OTLP receiver on 127.0.0.1, and
one venv per instrumentation package, built once and kept under `.cache/` in the checkout.

Each package gets its own venv with exact pins (the versions the research ran): they pull
their own OpenTelemetry releases and many instrumentors, which must not move this
project's. A venv is keyed by its requirements and the Python version, so a changed pin
builds a new one; building takes 15-30 s each the first time, a look-up after that.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request, Response
from spanbudget.app.processes import Child, Supervisor
from spanbudget.collector.readers import parse_traces
from spanbudget.collector.spans import Span

from tests.support.servers import ServerThread, free_port, wait_until

REPO = Path(__file__).resolve().parents[4]
VENVS = REPO / ".cache" / "instrumented-venvs"
APP = Path(__file__).with_name("instrumented_app.py")
_OTEL_SDK = ["opentelemetry-sdk==1.45.2", "opentelemetry-exporter-otlp-proto-http==1.45.2"]
# Exact pins, as found working here (see the module docstring).
REQUIREMENTS: dict[str, list[str]] = {
    # openlit brings its own exporters and pins openai below 3.
    "openlit": [
        "openlit==1.45.0",
        "openai==2.54.0",
        "opentelemetry-sdk==1.45.1",
        "qdrant-client==1.20.0",
    ],
    "openllmetry": [
        "opentelemetry-instrumentation-openai==0.62.4",
        "opentelemetry-instrumentation-qdrant==0.62.4",
        "opentelemetry-semantic-conventions-ai==0.5.1",
        "qdrant-client==1.20.0",
        "openai==3.57.0",
        *_OTEL_SDK,
    ],
    "openinference": [
        "openinference-instrumentation-openai==0.1.66",
        "openinference-instrumentation==0.1.72",
        "openinference-semantic-conventions==0.1.42",
        "openai==3.57.0",
        *_OTEL_SDK,
    ],
}


def venv_for(library: str) -> Path:
    """The venv of `library`'s pinned packages: reused when built, else built now."""
    requirements = "\n".join(REQUIREMENTS[library]) + "\n"
    key = hashlib.sha256(f"{sys.version_info[:2]}\n{requirements}".encode()).hexdigest()[:12]
    target = VENVS / f"{library}-{key}"
    if (target / "complete").exists():
        return target
    building = VENVS / f".{library}-{key}-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(building)], check=True, timeout=120)
    (building / "requirements.txt").write_text(requirements)
    install = subprocess.run(
        [str(building / "bin" / "python"), "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", "-r", str(building / "requirements.txt")],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if install.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        pytest.fail(f"cannot install {library}'s packages:\n{install.stderr[-3000:]}")
    (building / "complete").write_text(requirements)
    try:
        building.rename(target)
    except OSError:  # built meanwhile by another run: keep that one
        shutil.rmtree(building, ignore_errors=True)
    return target


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1 that keeps every request body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()
        self.app = FastAPI()

        @self.app.post("/v1/traces")
        async def traces(request: Request) -> Response:
            body = await request.body()
            with self.lock:
                self.bodies.append(body)
            return Response(b"", media_type="application/x-protobuf")

    def spans(self) -> list[Span]:
        with self.lock:
            bodies = list(self.bodies)
        return [span for body in bodies for span in parse_traces(body, "OTLP request")]


@dataclass
class Engine:
    url: str
    receiver: Receiver


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """`spanbudget engine` on a free port, its `llm_request` spans sent to a receiver."""
    receiver = Receiver()
    with ServerThread(receiver.app) as server:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "spanbudget", "engine", "--listen", f"127.0.0.1:{port}"]
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": server.url,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "HF_HUB_OFFLINE": "1",
        }
        log = tmp_path_factory.mktemp("engine") / "engine.log"
        supervisor = Supervisor()
        supervisor.start(Child("engine", command, f"{url}/health", log, env))
        try:
            supervisor.wait_healthy(supervisor.children[0], 90)
            yield Engine(url, receiver)
        finally:
            supervisor.stop_all()


@dataclass
class AppRun:
    """One run of `instrumented_app.py` under a library: its report and every span."""

    library: str
    report: dict[str, Any]
    spans: list[Span]  # the app's and the engine's

    def requests(self, *, stream: bool) -> list[dict[str, Any]]:
        return [r for r in self.report["requests"] if r["stream"] is stream]


@pytest.fixture(scope="session")
def app_run(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], AppRun]:
    """Run the app once per library (in that library's venv) and keep what it produced."""
    runs: dict[str, AppRun] = {}

    def run(library: str) -> AppRun:
        if library in runs:
            return runs[library]
        python = venv_for(library) / "bin" / "python"
        receiver = Receiver()
        out = tmp_path_factory.mktemp(library) / "report.json"
        engine_before = len(engine.receiver.spans())
        with ServerThread(receiver.app) as server:
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
            result = subprocess.run(
                [str(python), str(APP), library, "--engine", engine.url, "--otlp", server.url,
                 "--out", str(out)],
                capture_output=True, text=True, timeout=300, env=env, cwd=out.parent,
            )  # fmt: skip
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        report = json.loads(out.read_text())
        # The engine exports its spans a moment after each request ends.
        wait_until(
            lambda: len(engine.receiver.spans()) >= engine_before + len(report["requests"]),
            "the engine's llm_request spans",
        )
        engine_spans = engine.receiver.spans()[engine_before:]
        runs[library] = AppRun(library, report, receiver.spans() + engine_spans)
        return runs[library]

    return run
