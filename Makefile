# The two commands: `make demo` and `make test`. Both bootstrap .venv idempotently.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-install lint typecheck unit bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is pinned in the same install as everything else so that no CUDA build is pulled:
# the package itself pins no torch (see pyproject.toml's reference extra).
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0 -e '.[reference,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/spanbudget demo --exit

test: $(STAMP) lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

# The wheel with [reference] in a fresh venv, running the demo from another directory:
# a few minutes more, so CI (.ci/run) runs it after `make test`.
test-install: $(STAMP)
	$(BIN)/pytest -m reference_install tests/install

# Every benchmark in turn; each prints its own table (a few minutes in all).
bench: $(STAMP)
	$(BIN)/python bench/evaluate.py
	$(BIN)/python bench/readers.py
	$(BIN)/python bench/pipeline.py
	$(BIN)/python bench/ui.py
	$(BIN)/python bench/loadgen.py
	$(BIN)/python bench/gateway.py
	$(BIN)/python bench/engine.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
