# kgov: `make run` starts the platform on embedded defaults, `make test` runs every check.
# Both bootstrap the virtual environment (and, for tests, the system services) themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: run test lint unit system-deps bench clean venv openapi

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

system-deps:
	@bash scripts/system-deps.sh

run: $(STAMP)
	$(BIN)/kgov up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy kgov audit authz sasl registry encryption gateway spark_compliance

test: $(STAMP) system-deps lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

openapi: $(STAMP)
	$(BIN)/python scripts/write_openapi.py openapi.yaml

bench: $(STAMP)
	@for b in bench/*_bench.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .kgov .pytest_cache .mypy_cache .ruff_cache
