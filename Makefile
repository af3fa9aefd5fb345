# The front door. `make demo` and `make test` work on a fresh Debian 12 machine as root.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=
# Integration tests run on two Slurm releases, each on its own test cluster:
# 22.05 from the host's Debian 12 packages, 24.11 from a Debian 13 root that
# sbin/slurm-root makes once per machine (under /var/cache/acme, so every clone
# reuses it). The 24.11 cluster lives beside the 22.05 one, ports 500 higher.
CLUSTER_DIR         := $(or $(ACME_CLUSTER_DIR),/tmp/acme-test-cluster)
SLURM24_CLUSTER_DIR ?= $(CLUSTER_DIR)-slurm24
SLURM24_PORT_BASE   ?= $(if $(ACME_CLUSTER_PORT_BASE),$(shell expr $(ACME_CLUSTER_PORT_BASE) + 500),)
# What runs on 24.11: every integration test that uses the Slurm cluster; the
# others run no Slurm command (ACME_CLUSTER_TESTS_ONLY, tests/integration/conftest.py).
SLURM24_TESTS       ?= tests/integration

.PHONY: help dist venv deps bytecode cluster-up cluster-down demo test test-unit test-integration test-integration-slurm24 slurm24-root bench lint clean

help:
	@echo "make demo   - install what is missing, start the local Slurm cluster, run the demo"
	@echo "make test   - run the whole test suite (unit + integration on real Slurm 22.05 and 24.11, Postgres)"
	@echo "make bench  - run the benchmarks in bench/ (each prints one JSON object)"

venv: $(VENV)/.installed

# The wheel and the sdist an admin installs from (`pip install slurm-acme`, then
# `sacme admin install` on each node); both carry the node files (slurm_acme/data/node).
dist: venv
	rm -rf dist
	$(BIN)/python -m build --no-isolation --wheel --sdist --outdir dist .

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch first: a bare `torch` would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	# torch pinned again so no extra (the harnesses, embeddings) can swap it
	$(BIN)/pip install -q -e '.[torch,postgres,nvml,dev,embed,harness,bench,fast]' torch==2.13.0
	touch $@

deps:
	sbin/install-deps

cluster-up: deps
	sbin/acme-cluster up

cluster-down:
	sbin/acme-cluster down

demo: venv deps
	PATH="$(CURDIR)/$(BIN):$$PATH" examples/demo.sh

# This project's machines set PYTHONDONTWRITEBYTECODE: without compiled bytecode
# every sacme process the tests start would recompile each module it imports.
bytecode: venv
	$(BIN)/python -m compileall -q slurm_acme

test: venv deps bytecode
	sbin/ensure-postgres
	@# The 24.11 root builds (first time on a machine only) while the unit tests run;
	@# test-integration-slurm24 waits for it (sbin/slurm-root serialises on a lock).
	sbin/slurm-root ensure >/dev/null 2>&1 &
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-integration
	$(MAKE) --no-print-directory test-integration-slurm24

# Integration tests on the host's Slurm (22.05 on Debian 12).
test-integration: venv deps bytecode
	@echo "== integration tests on the host's Slurm ($$(slurmd -V), $(CLUSTER_DIR))"
	ACME_CLUSTER_DIR="$(CLUSTER_DIR)" ACME_SLURM_ROOT= PATH="$(CURDIR)/$(BIN):$$PATH" \
	    $(BIN)/pytest tests/integration $(PYTEST_ARGS)

# The same tests on Slurm 24.11, run from the Debian 13 root.
test-integration-slurm24: venv deps bytecode slurm24-root
	@echo "== integration tests on Slurm 24.11 from $$(sbin/slurm-root status) ($(SLURM24_CLUSTER_DIR))"
	ACME_CLUSTER_DIR="$(SLURM24_CLUSTER_DIR)" ACME_SLURM_ROOT="$$(sbin/slurm-root path)" ACME_CLUSTER_TESTS_ONLY=1 \
	    $(if $(SLURM24_PORT_BASE),ACME_CLUSTER_PORT_BASE=$(SLURM24_PORT_BASE),ACME_CLUSTER_PORT_BASE=) \
	    PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest $(SLURM24_TESTS) $(PYTEST_ARGS)

slurm24-root:
	sbin/slurm-root ensure

# No daemon needed: the tests marked postgres (see tests/conftest.py) run in `make test`.
test-unit: venv
	$(BIN)/pytest tests/unit -m "not postgres" $(PYTEST_ARGS)

bench: venv deps
	@for b in bench/*.py; do echo "== $$b" >&2; PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python $$b || exit 1; done

lint: venv
	$(BIN)/ruff check slurm_acme tests bench sbin/acme-cluster
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist *.egg-info
