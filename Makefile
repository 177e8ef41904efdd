# The two commands: `make demo` and `make test`. Both bootstrap .venv idempotently.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test test-install lint typecheck unit binaries bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch is pinned in the same install as everything else, so that no other build is pulled
# (the package itself pins no torch: see pyproject.toml's reference extra). torch==2.13.0
# comes from PyPI with its CUDA libraries, about 4 GB, and pip's HTTP cache does not keep
# it on this kind of machine (responses reach it without Cache-Control headers, so its HTTP
# cache stores nothing): it is downloaded once into a
# wheelhouse outside the repository, which every venv (and the wheel test's) installs from.
# The install also compiles the evaluator's fast path (setup.py): a change to it rebuilds.
TORCH := torch==2.13.0
export SPANBUDGET_WHEELHOUSE ?= $(HOME)/.cache/spanbudget/wheels
$(STAMP): pyproject.toml setup.py collector/_slots.pxi collector/judging/_judge.pyx \
		collector/readers/_wire.pyx | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip download --quiet --dest $(SPANBUDGET_WHEELHOUSE) $(TORCH)
	$(BIN)/python -m pip install --quiet --no-index --find-links $(SPANBUDGET_WHEELHOUSE) $(TORCH)
	$(BIN)/python -m pip install --quiet --find-links $(SPANBUDGET_WHEELHOUSE) $(TORCH) -e '.[reference,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/spanbudget demo --exit

test: $(STAMP) lint typecheck binaries unit

# Jaeger v2 and the OpenTelemetry Collector, built from source through the Go module proxy
# (deploy/build/): cached outside the repository by version and module hash, so only the
# first run pays (minutes); the interop tests run them. Needs Go 1.26.
binaries: $(STAMP)
	$(BIN)/python deploy/build/binaries.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/cython-lint --max-line-length 100 collector

typecheck: $(STAMP)
	$(BIN)/python -m tests.support.typecheck

# The judging tests run a second time on the pure-Python evaluator (the tree), and the
# intake's format tests on the protobuf package's reader instead of the wire reader: what
# judges where no C compiler built the compiled ones. Neither path can rot.
# A binary that `make binaries` did not produce fails the test that needs it (no skip).
# The suite runs on TEST_WORKERS pytest-xdist workers, twice the two cores: many tests wait
# on the processes they start (on this machine, busy with other runs, four took 10.8 min
# and three 13.0). Each module stays on one worker (loadscope), and the longest modules of
# the last run start first (tests/conftest.py; xdist's own order, by number of tests, is
# off). The tests marked `timing` hold a measured time to a bound: they run alone
# afterwards, on a machine the other workers no longer load.
# The 15 slowest tests are listed, to keep a warm run within 10 minutes.
TEST_WORKERS ?= 4
unit: $(STAMP) binaries
	SPANBUDGET_REQUIRE_BINARIES=1 $(BIN)/pytest -n $(TEST_WORKERS) --dist loadscope \
		--no-loadscope-reorder -m 'not reference_install and not timing' --durations=15
	SPANBUDGET_REQUIRE_BINARIES=1 $(BIN)/pytest -q -m timing
	SPANBUDGET_PURE_PYTHON=1 $(BIN)/pytest -q tests/collector/judging \
		tests/collector/intake/test_intake_formats.py tests/collector/intake/test_admission.py

# The wheel with [reference] in a fresh venv, running the demo from another directory:
# a few minutes more, so CI (.ci/run) runs it after `make test`.
test-install: $(STAMP)
	$(BIN)/pytest -m reference_install tests/install

# Every benchmark in turn at full size, each printing its own table, then one summary:
# each headline figure, its aim and its ratio to the floor measured in the same run.
# tests/bench runs each of them in its --quick mode (so `make test` and CI do).
BENCH_SUMMARY := $(abspath .bench-summary.jsonl)
BENCHES := evaluate instructions readers wire journal pipeline overload ui loadgen engine gateway cpu interop
bench: $(STAMP) binaries
	rm -f $(BENCH_SUMMARY)
	set -e; for b in $(BENCHES); do \
		echo "== bench/$$b.py"; \
		SPANBUDGET_BENCH_SUMMARY=$(BENCH_SUMMARY) $(BIN)/python bench/$$b.py; \
	done
	$(BIN)/python bench/bench_summary.py $(BENCH_SUMMARY)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
