"""Shared test fixtures: the fixtures folder beside the checkout, and Debian tools on demand."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.locks import MACHINE_LOCKS, exclusive

REPO = Path(__file__).resolve().parent.parent
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"

# Binary -> the Debian package that ships it.
DEBIAN_PACKAGES = {
    "promtool": "prometheus",
    "prometheus": "prometheus",
    "amtool": "prometheus-alertmanager",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "chromium": "chromium",
    "node": "nodejs",
    "npm": "npm",
    "valgrind": "valgrind",
}


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """The real third-party data files beside the checkout (see its README for provenance)."""
    if not SHARED_FIXTURES.is_dir():
        pytest.skip(f"shared fixtures folder absent: {SHARED_FIXTURES}")
    return SHARED_FIXTURES


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three small documents ingested once per run; a stack takes a copy of the data folder
    (`tests.support.stack.corpus_copy`) rather than embedding them again. Under pytest-xdist
    the first worker to ask ingests them into the run's shared temp folder, the others wait
    and read it."""
    from tests.support.stack import ingest_small_corpus

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = shared / "small-corpus"
    with exclusive(shared / "small-corpus.lock"):
        if not (root / "ingested").exists():
            shutil.rmtree(root, ignore_errors=True)  # a worker died halfway
            root.mkdir()
            ingest_small_corpus(root, {"HF_HUB_OFFLINE": "1"})
            (root / "ingested").touch()
    return root / "data"


def _apt_install(package: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=600)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package],
        check=True,
        env=env,
        timeout=1200,
    )


@pytest.fixture(scope="session")
def debian_binary() -> Callable[[str], str]:
    """Return a function that finds a Debian tool, installing its package when missing.

    The tests that need Prometheus, Alertmanager or Chromium install them themselves, so
    `make test` works on a machine that has only Python and apt. One worker installs at a
    time (apt takes no second install meanwhile); the others wait, then find the tool.
    """

    def find(binary: str) -> str:
        path = shutil.which(binary)
        if path is None:
            package = DEBIAN_PACKAGES[binary]
            if os.geteuid() != 0 or shutil.which("apt-get") is None:
                pytest.fail(f"{binary} is missing and cannot be installed: run as root with apt")
            with exclusive(MACHINE_LOCKS / "apt.lock"):
                if shutil.which(binary) is None:  # not installed by another worker meanwhile
                    _apt_install(package)
            path = shutil.which(binary)
        assert path is not None, (
            f"{binary} still missing after installing {DEBIAN_PACKAGES[binary]}"
        )
        return path

    return find
