"""Every exception spanbudget defines is a `SpanbudgetError`, under its part's root, so
that one `except` catches what spanbudget refuses or fails at."""

from __future__ import annotations

import importlib
import inspect

import pytest
from spanbudget.collector.errors import CollectorError
from spanbudget.common.errors import SpanbudgetError
from spanbudget.service.errors import ServiceError

from tests.support.layout import module_files

# Modules that need the [reference] extra import fine here (make test installs it).
MODULES = sorted(name for name in module_files() if not name.endswith("__main__"))


def defined_exceptions() -> list[type[BaseException]]:
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(cls, BaseException)
                and cls.__module__ == name
                and not cls.__name__.startswith("_")
            ):
                found.append(cls)
    return found


def test_the_walk_finds_both_parts() -> None:
    assert any(name.startswith("spanbudget.collector.judging") for name in MODULES)
    assert any(name.startswith("spanbudget.service.engine") for name in MODULES)


@pytest.mark.parametrize("cls", defined_exceptions(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_exception_has_the_root_of_its_part(cls: type[BaseException]) -> None:
    assert issubclass(cls, SpanbudgetError)
    if cls.__module__.startswith("spanbudget.collector."):
        assert issubclass(cls, CollectorError)
    elif cls.__module__.startswith("spanbudget.service."):
        assert issubclass(cls, ServiceError)
