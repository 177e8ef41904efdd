"""The Jaeger and OpenTelemetry Collector binaries that `make binaries` builds
(deploy/build/binaries.py), for the tests that run them.

`make test` builds them first and sets SPANBUDGET_REQUIRE_BINARIES=1: a binary missing
then fails the test that needs it. Where the suite runs without that target (a bare
`pytest`), such a test skips and says how to build.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

__all__ = ["go_binary", "go_binary_version"]

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "build" / "binaries.py"


def _build_module() -> Any:
    loaded = sys.modules.get("spanbudget_binaries")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("spanbudget_binaries", BUILD_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def go_binary(name: str) -> Path:
    """The binary built from the module's present files (`jaeger`, `otelcol-spanbudget`)."""
    path: Path = _build_module().by_name(name).path()
    if path.is_file():
        return path
    if os.environ.get("SPANBUDGET_REQUIRE_BINARIES") == "1":
        pytest.fail(f"make binaries ran but produced no {name}: {path} is missing")
    pytest.skip(f"{name} is not built ({path}): run `make binaries`")


def go_binary_version(name: str) -> str:
    """The release `make binaries` builds of `name`, e.g. "2.12.0" for `jaeger`."""
    version: str = _build_module().by_name(name).version
    return version
