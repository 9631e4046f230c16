# Two entry points for a fresh machine (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast install install-dev serve bench eval

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip

# core + service: rules-only diagnosis, SQLite, no LLM
$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# everything the tests need: local LLM backends (CPU torch), fuzzing, browser driver
$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[llm,dev]'
	touch $@ $(VENV)/.core

install: $(VENV)/.core
install-dev: $(VENV)/.dev

demo: $(VENV)/.core
	$(BIN)/logdx diagnose examples/sample_job.log

test: $(VENV)/.dev
	$(BIN)/python -m pytest -q

test-fast: $(VENV)/.dev
	$(BIN)/python -m pytest -q -m "not slow"

serve: $(VENV)/.core
	$(BIN)/logdx serve

# the speed benchmark (bench/README.md): generates a 500 MB log on first run; BENCH_ARGS="--size-mb 100" for less
bench: $(VENV)/.core
	$(BIN)/python bench/bench_compress.py $(BENCH_ARGS)

eval: $(VENV)/.core
	$(BIN)/python bench/eval_realworld.py
