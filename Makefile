# The front door. `make demo` and `make test` work on a fresh Debian 12 machine as root.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: help venv deps cluster-up cluster-down demo test test-unit test-integration bench lint clean

help:
	@echo "make demo   - install what is missing, start the local Slurm cluster, run the demo"
	@echo "make test   - run the whole test suite (unit + integration on real Slurm and Postgres)"
	@echo "make bench  - run the benchmarks in bench/ (each prints one JSON object)"

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch first: a bare `torch` would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	# torch pinned again so no extra (the harnesses, embeddings) can swap it
	$(BIN)/pip install -q -e '.[torch,postgres,nvml,dev,embed,harness,bench]' torch==2.13.0
	touch $@

deps:
	sbin/install-deps

cluster-up: deps
	sbin/acme-cluster up

cluster-down:
	sbin/acme-cluster down

demo: venv deps
	PATH="$(CURDIR)/$(BIN):$$PATH" examples/demo.sh

test: venv deps
	sbin/ensure-postgres
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest tests/integration $(PYTEST_ARGS)

# No daemon needed: the tests marked postgres (see tests/conftest.py) run in `make test`.
test-unit: venv
	$(BIN)/pytest tests/unit -m "not postgres" $(PYTEST_ARGS)

bench: venv deps
	@for b in bench/*.py; do echo "== $$b" >&2; PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python $$b || exit 1; done

lint: venv
	$(BIN)/ruff check slurm_acme tests bench sbin/acme-cluster
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info
