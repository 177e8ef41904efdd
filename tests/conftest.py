"""Shared test fixtures: the fixtures folder beside the checkout, and Debian tools on demand;
and how `make test` spreads the suite over pytest-xdist workers."""

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


# Under pytest-xdist (`make test`: --dist loadscope) a module's tests stay together on one
# worker: its module fixtures (a started stack, a built wheel) are built once, and tests that
# follow one another (the demo's first run, then its second) keep their order. The modules
# that took longest in the last run go first, so that the many quick ones fill the workers'
# last minutes instead of one long module starting last.
MODULE_SECONDS = "spanbudget/module-seconds"


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    if not os.environ.get("PYTEST_XDIST_WORKER") or cache is None:
        return  # a plain run keeps the files' order
    seconds: dict[str, float] = cache.get(MODULE_SECONDS, {})
    # Longest first; a module the last run did not see (new, renamed) counts as long. Every
    # worker reads the same cache, so all of them collect in the same order; the sort is
    # stable, so a module's tests keep theirs.
    items.sort(key=lambda item: -seconds.get(_module_of(item.nodeid), float("inf")))


_TOOK: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = _module_of(report.nodeid)
    _TOOK[module] = _TOOK.get(module, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    cache = getattr(session.config, "cache", None)
    if _TOOK and cache is not None and not hasattr(session.config, "workerinput"):
        cache.set(MODULE_SECONDS, {**cache.get(MODULE_SECONDS, {}), **_TOOK})
