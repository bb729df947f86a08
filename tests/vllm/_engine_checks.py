"""The checks every speculative engine under test passes (shared by the engine test modules)."""

from __future__ import annotations

from conftest import LAW_PROMPTS, MAX_TOKENS, PROMPTS

#: Samples per T = 1 law check; with alpha = 1e-3 a correct engine fails one check with
#: probability 0.1 % (Pearson's chi-square is asymptotic: cells are merged to expected counts >= 5).
N_SAMPLES = 400
ALPHA = 1e-3


def greedy_ids(llm, prompts=PROMPTS) -> list[list[int]]:
    from vllm import SamplingParams

    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def law_samples(llm, ids: list[int], n: int = N_SAMPLES, seed: int = 1234, tokens: int = 2) -> list[list[int]]:
    """n seeded T = 1 samples of the first ``tokens`` generated tokens after the prompt ``ids``."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sp = SamplingParams(n=n, temperature=1.0, max_tokens=tokens, seed=seed)
    out = llm.generate([TokensPrompt(prompt_token_ids=ids)], sp, use_tqdm=False)[0]
    return [list(c.token_ids) for c in out.outputs]


def spec_stats(llm) -> dict[str, float]:
    """vLLM's speculative-decoding counters (drafts proposed / accepted) since start."""
    stats = {}
    for m in llm.get_metrics():
        if m.name in ("vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens"):
            stats[m.name.split(":")[1]] = float(getattr(m, "value", 0))
    return stats


__all__ = ["greedy_ids", "law_samples", "spec_stats", "N_SAMPLES", "ALPHA", "LAW_PROMPTS"]
