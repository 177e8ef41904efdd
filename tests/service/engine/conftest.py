"""Fixtures of the engine emulator tests: one tokenizer and output planner per session."""

from __future__ import annotations

import pytest
from spanbudget.service.engine.generation import OutputPlanner
from spanbudget.service.tokens import TokenCounter, load_tokenizer


@pytest.fixture(scope="session")
def tokenizer() -> TokenCounter:
    return load_tokenizer()


@pytest.fixture(scope="session")
def planner(tokenizer: TokenCounter) -> OutputPlanner:
    return OutputPlanner(tokenizer, seed=7)
