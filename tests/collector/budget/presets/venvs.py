"""One venv per instrumentation library (and one for the zoo's server), with exact pins,
built once and kept outside the checkout, in $SPANBUDGET_VENV_CACHE (default
~/.cache/spanbudget/instrumented-venvs), where every clone of the project finds them.

Each library pulls its own OpenTelemetry releases and many instrumentors, which must not
move this project's, so each gets a venv of its own. A venv is keyed by its requirements
and the Python version: a changed pin builds a new one (15-60 s from PyPI), an unchanged
one is a look-up. The pins are the releases the research for issue 44 ran; what each
needs, and why, beside it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.locks import exclusive

__all__ = ["REQUIREMENTS", "VENVS", "VenvError", "venv_for"]


def _cache() -> Path:
    configured = os.environ.get("SPANBUDGET_VENV_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "spanbudget" / "instrumented-venvs"


VENVS = _cache()

_OTEL = [
    "opentelemetry-api==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-exporter-otlp-proto-http==1.45.2",
    "opentelemetry-instrumentation==0.66b2",
    "opentelemetry-semantic-conventions==0.66b2",
]
# openai 3 sends through httpx2 (pydantic's fork of httpx), which no OTel instrumentor covers.
_OPENAI = "openai==3.63.0"
_LANGCHAIN = ["langchain-core==1.8.3", "langchain-openai==1.8.1", "langsmith==0.15.1"]
REQUIREMENTS: dict[str, list[str]] = {
    # The OpenAI-compatible server, traced by opentelemetry-instrumentation-fastapi; httpx
    # forwards to the engine emulator.
    "server": [
        "fastapi==0.165.0",
        "starlette==1.10.0",
        "uvicorn==0.55.0",
        "opentelemetry-instrumentation-fastapi==0.66b2",
        "opentelemetry-instrumentation-asgi==0.66b2",
        "httpx==0.29.0",
        *_OTEL,
    ],
    "openllmetry": [
        "opentelemetry-instrumentation-openai==0.62.4",
        "opentelemetry-instrumentation-qdrant==0.62.4",
        "opentelemetry-semantic-conventions-ai==0.5.1",
        "qdrant-client==1.20.0",
        _OPENAI,
        *_OTEL,
    ],
    "openinference": [
        "openinference-instrumentation-openai==0.1.66",
        "openinference-instrumentation==0.1.72",
        "openinference-semantic-conventions==0.1.42",
        _OPENAI,
        *_OTEL,
    ],
    # openlit 1.45 requires openai<3 (so httpx, which its httpx instrumentor covers) and
    # brings its own exporters; with the SDK pinned pip resolves it in seconds, unpinned
    # it backtracks for many minutes.
    "openlit": [
        "openlit==1.45.0",
        "openai==2.54.0",
        "opentelemetry-sdk==1.45.1",
        "qdrant-client==1.20.0",
    ],
    # opentelemetry-util-genai 1.2b0 and later renamed the module openai-v2 2.4b0 imports
    # (`instruments`), and its requirement admits them: pinned to the last that works.
    "openai-v2": [
        "opentelemetry-instrumentation-openai-v2==2.4b0",
        "opentelemetry-util-genai==1.1b0",
        _OPENAI,
        *_OTEL,
    ],
    "lc-openinference": [
        "openinference-instrumentation-langchain==0.1.80",
        "openinference-instrumentation==0.1.72",
        "openinference-semantic-conventions==0.1.42",
        *_LANGCHAIN,
        "numpy==2.4.6",  # InMemoryVectorStore's similarity
        _OPENAI,
        *_OTEL,
    ],
    "lc-openllmetry": [
        "opentelemetry-instrumentation-langchain==0.62.4",
        "opentelemetry-semantic-conventions-ai==0.5.1",
        *_LANGCHAIN,
        "numpy==2.4.6",
        _OPENAI,
        *_OTEL,
    ],
}


class VenvError(RuntimeError):
    """A library's pinned packages did not install; the message ends with pip's output."""


def venv_for(name: str) -> Path:
    """The venv of `name`'s pinned packages: reused when built, else built now."""
    requirements = "\n".join(REQUIREMENTS[name]) + "\n"
    key = hashlib.sha256(f"{sys.version_info[:2]}\n{requirements}".encode()).hexdigest()[:12]
    target = VENVS / f"{name}-{key}"
    if (target / "complete").exists():
        return target
    # One test worker builds it; another that asks meanwhile waits, then finds it built.
    with exclusive(VENVS / f".{name}-{key}.lock"):
        if not (target / "complete").exists():
            _build(name, requirements, target)
    return target


def _build(name: str, requirements: str, target: Path) -> None:
    building = target.with_name(f".{target.name}-{os.getpid()}")
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
        raise VenvError(f"cannot install {name}'s packages:\n{install.stderr[-3000:]}")
    (building / "complete").write_text(requirements)
    try:
        building.rename(target)
    except OSError:  # built meanwhile by another run: keep that one
        shutil.rmtree(building, ignore_errors=True)


if __name__ == "__main__":  # build them all ahead: python -m tests.collector.budget.presets.venvs
    for library in sys.argv[1:] or REQUIREMENTS:
        print(library, venv_for(library), flush=True)
