"""vLLM integration tests: they run in vLLM's own environment (``make test-vllm``, .venv-vllm) and
skip where vLLM is not installed (specot's environment pins a transformers vLLM 0.32 refuses).

The engine tests share one reference: vLLM's own autoregressive decoding of the embedded target
in float32 (no speculation), computed once per session and its engine stopped at once."""

from __future__ import annotations

import json
import os

import pytest

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Once upon a time, in a small village,",
    "1, 2, 3, 4, 5, 6, 7, 8,",
]
#: T = 1 law checks: a repetitive prompt (suffix drafts after the first token) and an open one.
LAW_PROMPTS = {"repeat": "a b c d a b c d a b c d a b c", "open": "Once upon a time"}
MAX_TOKENS = 24


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """vLLM without speculation: greedy token ids per prompt and the exact T = 1 law of the first
    two generated tokens of each law prompt."""
    pytest.importorskip("vllm.config")  # (this folder is a namespace "vllm" where vLLM is absent)
    from specot_vllm import engines

    try:
        engines.target_dir()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    from vllm import SamplingParams

    # the engine processes started from here on report which patches ran in them (SPECOT_VLLM_TRACE)
    os.environ["SPECOT_VLLM_TRACE"] = str(tmp_path_factory.mktemp("trace") / "trace.jsonl")
    llm = engines.make_llm()
    try:
        tok = llm.get_tokenizer()
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS), use_tqdm=False)
        greedy = [list(o.outputs[0].token_ids) for o in outs]
        texts = [o.outputs[0].text for o in outs]
        laws = {k: engines.first_token_law(llm, tok.encode(p)) for k, p in LAW_PROMPTS.items()}
        ids = {k: tok.encode(p) for k, p in LAW_PROMPTS.items()}
    finally:
        engines.shutdown(llm)
    return {"greedy": greedy, "texts": texts, "laws": laws, "law_ids": ids}


def traced(event: str) -> list[dict]:
    """The ``event`` lines the engine processes wrote to ``SPECOT_VLLM_TRACE`` (see
    :func:`specot_vllm.patches._trace`)."""
    path = os.environ.get("SPECOT_VLLM_TRACE")
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return [d for d in map(json.loads, fh) if d["event"] == event]
