"""Fixtures of the llama.cpp backend tests: one target on the embedded SmolLM2 GGUF for the session.

The whole folder is skipped when llama-cpp-python is not installed (``make setup-llamacpp``). The
target runs one thread: exactness does not depend on the thread count (every output element is
computed by one thread, with the same kernel), and one thread never busy-waits for another on a
loaded machine. Its drafts are priced with the labelled fallback cost model (``auto_calibrate`` off:
no test pays for a calibration it did not ask for); ``test_calibration_llamacpp`` measures.
"""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed: make setup-llamacpp")

from specot_llamacpp import load_target  # noqa: E402

PROMPTS = (
    "Explain in two sentences what a Python generator is.",
    "Write a Python function that returns the n-th Fibonacci number, then explain it.",
    "List three differences between TCP and UDP.",
)


@pytest.fixture(scope="session")
def target():
    t = load_target(n_threads=1, n_ctx=2048)
    t.auto_calibrate = False
    yield t
    t.close()


@pytest.fixture(scope="session")
def prompt_ids(target):
    return [target.encode_prompt(p) for p in PROMPTS]
