# dd-slurm: every target installs what it needs; a fresh Debian machine needs only python3 and make.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CLUSTER := fixtures/cluster/cluster.sh
PYTEST_ARGS ?=
# Real-cluster tests mostly wait on Slurm, so more workers than cores pays off.
WORKERS ?= 4

.PHONY: install test unit cluster-up cluster-down cluster-status client-env demo bench diagram clean

$(STAMP): pyproject.toml requirements/constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -c requirements/constraints.txt -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

# The README's test command: unit tests plus the real-Slurm tests against the local cluster.
test: install
	@cluster=up; bash $(CLUSTER) up || cluster=down; \
	if [ $$cluster = down ]; then \
	    echo "!!! The local Slurm cluster could not start: the real-Slurm tests cannot run here. !!!" >&2; \
	    if [ "$${CI:-}" = "true" ]; then echo "!!! CI=true: failing instead of skipping them. !!!" >&2; exit 1; fi; \
	else \
	    bash fixtures/demo/client-env.sh || { echo "!!! could not install the example client environment !!!" >&2; exit 1; }; \
	fi; \
	export DD_SLURM_TEST_CLUSTER=$$cluster; \
	$(BIN)/python -m pytest -n $(WORKERS) -m "not cluster_fault" $(PYTEST_ARGS) && \
	$(BIN)/python -m pytest -m cluster_fault $(PYTEST_ARGS)

# Unit tests only (no cluster); fast feedback while editing.
unit: install
	DD_SLURM_TEST_CLUSTER=down $(BIN)/python -m pytest -n 2 -m "not slurm" $(PYTEST_ARGS)

cluster-up:
	bash $(CLUSTER) up

cluster-down:
	bash $(CLUSTER) down

cluster-status:
	bash $(CLUSTER) status

diagram: install
	$(BIN)/dd-slurm diagram

# The example Data Designer client's environment (/opt/dd-slurm-demo), used by the demo and its test.
client-env:
	bash fixtures/demo/client-env.sh

demo: install
	bash $(CLUSTER) up
	bash fixtures/demo/demo.sh

bench: install
	@test -x /usr/bin/time || { [ "$$(id -u)" = 0 ] && apt-get install -y -qq time >/dev/null; } || true
	$(BIN)/python -m tests.bench.bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
