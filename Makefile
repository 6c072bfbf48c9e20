# `make demo` and `make test` both set everything up first (idempotent), then run.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup test demo lint clean

setup:
	@bash scripts/setup.sh

test: setup
	@echo "[test] running the test suite on every core, one test file per worker (tests/; tests/core/test_architecture.py runs the import-linter contracts)" >&2
	@$(PY) -m pytest -q -n auto --dist loadfile $(PYTEST_ARGS) tests

demo: setup
	@echo "[demo] running the built-in demo" >&2
	@$(VENV)/bin/retrieval demo --out demo-output

lint: setup
	@echo "[lint] ruff, then the import-linter contracts (layers, no import cycles; pyproject.toml)" >&2
	@$(VENV)/bin/ruff check retrieval tests
	@$(VENV)/bin/lint-imports

clean:
	rm -rf demo-output .pytest_cache
