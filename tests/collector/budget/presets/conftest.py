"""Fixtures for the preset tests: the zoo of issue 44, run once a session per variant.

Each variant runs the zoo's server (traced by opentelemetry-instrumentation-fastapi) and the
zoo's app under one instrumentation library, each in a venv of its own with exact pins
(`venvs.py`, cached under `.cache/instrumented-venvs`); their spans go to a receiver that
writes the OTLP/JSON lines file `spanbudget check` reads and passes them on, live, to a
collector (`zoo.py`). Cold, the venvs take about a minute (built side by side); warm, a
variant takes about five seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.collector.budget.presets.receiver import Receiver
from tests.collector.budget.presets.venvs import REQUIREMENTS, VenvError, venv_for
from tests.collector.budget.presets.zoo import VARIANTS, ZooRun, run_variant

__all__ = ["Receiver", "ZooRun"]  # test_suggest_reference takes its receiver from here


@pytest.fixture(scope="session")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], ZooRun]:
    """Run a variant of the zoo (once a session) and keep what it produced."""
    runs: dict[str, ZooRun] = {}
    failed: dict[str, str] = {}
    built: list[bool] = []

    def run(variant: str) -> ZooRun:
        assert variant in VARIANTS, variant
        if not built:
            try:
                with ThreadPoolExecutor(len(REQUIREMENTS)) as pool:
                    list(pool.map(venv_for, REQUIREMENTS))
            except VenvError as error:
                pytest.fail(str(error))
            built.append(True)
        if variant in failed:  # once is enough: each test that needs it fails with this
            pytest.fail(failed[variant])
        if variant not in runs:
            try:
                runs[variant] = run_variant(variant, tmp_path_factory.mktemp(variant))
            except Exception as error:  # an assertion, or a process that did not start
                failed[variant] = f"the zoo's {variant} run failed: {error}"
                raise
        return runs[variant]

    return run


@pytest.fixture(params=VARIANTS)
def run(request: pytest.FixtureRequest, zoo: Callable[[str], ZooRun]) -> ZooRun:
    """Each variant of the zoo in turn."""
    return zoo(request.param)
