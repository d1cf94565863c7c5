# The developer's front door. `make help` lists the targets.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-$(shell (cat pyproject.toml; $(PY) --version) | sha1sum | cut -c1-12)

.PHONY: help demo test test-fast lint format typecheck services bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

services:  ## install redis-server and PostgreSQL when missing (apt-get)
	./scripts/install-services.sh

demo: $(STAMP)  ## produce orders, run a worker on them (embedded engine), print what happened
	$(BIN)/python examples/quickstart/demo.py

# The whole suite runs on TEST_WORKERS pytest-xdist workers, each test's shared servers kept on
# one worker (tests/support/xdist_scopes.py); tests/README.md has the figures. TEST_WORKERS=0 runs
# it in one process. The package and the tests are byte-compiled first, as an installed package
# is: under PYTHONDONTWRITEBYTECODE every `streamworker` subprocess of the suite (some 500)
# would compile what it imports from source again.
TEST_WORKERS ?= 4

test: $(STAMP) services  ## the whole suite (unit, engine, conformance, integration, slow)
	$(BIN)/python -m compileall -q streamworker tests
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The inner loop (tests/README.md has its figures): leaves out the slow suites, the tests marked
# redis (compared with redis-server, or run on it) and engine_server (`streamworker engine serve`);
# hypothesis runs its dev profile unless CI=true.
FAST_TESTS := tests/unit tests/engine tests/conformance
FAST_MARKS := not slow and not redis and not engine_server

test-fast: $(STAMP)  ## unit, engine without redis-server, conformance on the in-process engine
	$(BIN)/pytest -q -m '$(FAST_MARKS)' $(FAST_TESTS)

lint: $(STAMP)  ## ruff, formatting, mypy strict, import contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP)  ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: $(STAMP)  ## mypy strict on the package
	$(BIN)/mypy

bench: $(STAMP) services  ## run the benchmarks (see benchmarks/README.md)
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python -m benchmarks

clean:  ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
