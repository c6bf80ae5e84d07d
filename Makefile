# dd-slurm: every target installs what it needs; a fresh Debian machine needs only python3 and make.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CLUSTERS_SH := fixtures/cluster/clusters.sh
# The lab's Slurm releases (fixtures/cluster/versions.tsv); CLUSTERS=22.05 (or any subset) selects.
CLUSTERS ?= 22.05 24.11 26.05
PYTEST_ARGS ?=
# Real-cluster tests mostly wait on Slurm, so more workers than cores pays off.
WORKERS ?= 4

.PHONY: install lint test unit cluster-up cluster-down cluster-status client-env demo bench diagram clean

# editable_mode=compat: a plain path in a .pth file; the default import-hook finder costs every
# fresh process (`dd-slurm status`) about 20 ms before any of our code runs.
$(STAMP): pyproject.toml requirements/constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -c requirements/constraints.txt -e '.[test]' \
	    --config-settings editable_mode=compat
	@touch $(STAMP)

install: $(STAMP)

# The README's test command: unit tests plus the real-Slurm tests against every selected lab
# cluster (one per Slurm release), then the tests that stop cluster daemons (each cluster's one
# after another, the clusters side by side). CI=true fails when a cluster cannot start.
# ruff and mypy, configured in pyproject.toml; make test runs them first and stops on a finding.
lint: install
	$(BIN)/ruff check dd_slurm tests
	$(BIN)/mypy

test: install lint
	@export CLUSTERS="$(CLUSTERS)"; \
	bash $(CLUSTERS_SH) up; rc=$$?; [ $$rc = 2 ] && exit 2; \
	if [ $$rc != 0 ]; then \
	    echo "!!! Not every selected Slurm cluster ($(CLUSTERS)) could start: their real-Slurm tests cannot run here. !!!" >&2; \
	    if [ "$${CI:-}" = "true" ]; then echo "!!! CI=true: failing instead of skipping them. !!!" >&2; exit 1; fi; \
	fi; \
	up=$$(bash $(CLUSTERS_SH) status 2>/dev/null | awk '$$3 == "up" {print $$1}' | xargs); \
	if [ -z "$$up" ]; then export DD_SLURM_TEST_CLUSTER=down; else \
	    export DD_SLURM_TEST_CLUSTER=up DD_SLURM_TEST_CLUSTERS="$$up"; \
	    CLUSTERS="$$up" bash $(CLUSTERS_SH) client-env || { echo "!!! could not install the example client environment !!!" >&2; exit 1; }; \
	fi; \
	echo "== real-Slurm tests on: $${up:-none}" >&2; \
	$(BIN)/python -m pytest -n $(WORKERS) --maxschedchunk 2 -m "not cluster_fault" $(PYTEST_ARGS) && \
	$(BIN)/python -m pytest -n $$(echo $${up:-x} | wc -w) --dist loadgroup -m cluster_fault $(PYTEST_ARGS)

# Unit tests only (no cluster); fast feedback while editing.
unit: install
	DD_SLURM_TEST_CLUSTER=down $(BIN)/python -m pytest -n 2 -m "not slurm" $(PYTEST_ARGS)

cluster-up:
	CLUSTERS="$(CLUSTERS)" bash $(CLUSTERS_SH) up

cluster-down:
	CLUSTERS="$(CLUSTERS)" bash $(CLUSTERS_SH) down

# One line per cluster: `<version> DD_SLURM_BIN_DIR=<dir> up|down ...`.
cluster-status:
	@CLUSTERS="$(CLUSTERS)" bash $(CLUSTERS_SH) status

diagram: install
	$(BIN)/dd-slurm diagram

# The example Data Designer client's environment (/opt/dd-slurm-demo), used by the demo and its test.
client-env:
	bash fixtures/demo/client-env.sh

demo: install
	bash fixtures/cluster/cluster.sh up
	bash fixtures/demo/demo.sh

bench: install
	@test -x /usr/bin/time || { [ "$$(id -u)" = 0 ] && apt-get install -y -qq time >/dev/null; } || true
	$(BIN)/python -m tests.bench.bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
