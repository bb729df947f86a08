"""vLLM integration tests: they run in vLLM's own environment (``make test-vllm``, .venv-vllm) and
skip where vLLM is not installed (specot's environment pins a transformers vLLM 0.32 refuses).

The engine tests share one reference: vLLM's own autoregressive decoding of the embedded target
in float32 (no speculation), computed once per session and its engine stopped at once."""

from __future__ import annotations

import json
import os

import pytest

# Under pytest-xdist (`make test-vllm` runs one test process per core), each process's engines get
# a core of their own: two engines bound to the same two cores would wait on each other's threads.
if os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
    _cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(_cores[int(os.environ["PYTEST_XDIST_WORKER"][2:]) % len(_cores)])

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Once upon a time, in a small village,",
    "1, 2, 3, 4, 5, 6, 7, 8,",
]
#: Prompts whose suffix trees branch (one continuation of a phrase, then another): the accepted
#: path of a draft tree goes through a later child, so its K/V must move (the tree engine tests).
TREE_PROMPTS = [
    "red green blue red green yellow red green blue red green yellow red green",
    "Alice likes tea. Bob likes coffee. Carol likes tea. Dave likes coffee. Eve likes",
]
#: T = 1 law checks: a repetitive prompt (suffix drafts after the first token) and an open one.
LAW_PROMPTS = {"repeat": "a b c d a b c d a b c d a b c", "open": "Once upon a time"}
MAX_TOKENS = 24


def penalized_params():
    """Greedy with a repetition penalty and top-2 logprobs: a request that a tree deployment serves
    through vLLM's own sampler, one token per step."""
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, repetition_penalty=1.3, logprobs=2)


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """vLLM without speculation: greedy token ids per prompt (``PROMPTS``; ``tree_greedy``:
    ``PROMPTS + TREE_PROMPTS``), the exact T = 1 law of the first two generated tokens of each law
    prompt, and of the first three of the repetitive one (``law3``: the third token is drawn at a
    draft-tree node when the second was an accepted draft)."""
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
        outs = llm.generate(PROMPTS + TREE_PROMPTS, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
                            use_tqdm=False)
        greedy = [list(o.outputs[0].token_ids) for o in outs]
        texts = [o.outputs[0].text for o in outs[:len(PROMPTS)]]
        laws = {k: engines.first_token_law(llm, tok.encode(p)) for k, p in LAW_PROMPTS.items()}
        ids = {k: tok.encode(p) for k, p in LAW_PROMPTS.items()}
        law3 = engines.first_token_law(llm, ids["repeat"], depth=3, top=4)
        pen = llm.generate(PROMPTS[:1], penalized_params(), use_tqdm=False)[0].outputs[0]
    finally:
        engines.shutdown(llm)
    return {"greedy": greedy[:len(PROMPTS)], "tree_greedy": greedy, "texts": texts, "laws": laws, "law_ids": ids,
            "law3": law3, "penalized": (list(pen.token_ids), top_logprobs(pen.logprobs))}


def top_logprobs(logprobs) -> list[dict[int, float]]:
    """vLLM's per-token logprobs as plain dicts."""
    return [{int(t): float(lp.logprob) for t, lp in step.items()} for step in logprobs]


def traced(event: str) -> list[dict]:
    """The ``event`` lines the engine processes wrote to ``SPECOT_VLLM_TRACE`` (see
    :func:`specot_vllm.observe.trace`)."""
    path = os.environ.get("SPECOT_VLLM_TRACE")
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return [d for d in map(json.loads, fh) if d["event"] == event]


def token_rows(*seqs: list[int], width: int = 64):
    """vLLM's input batch as a proposer sees it: a zero-padded ``[B, width]`` token table and the
    ``[B]`` lengths of ``seqs``."""
    import numpy as np

    table = np.zeros((len(seqs), width), dtype=np.int64)
    for i, s in enumerate(seqs):
        table[i, :len(s)] = s
    return table, np.array([len(s) for s in seqs])
