"""The static-cache mode of CausalLM (the CUDA-graph path, :meth:`CausalLM.use_static_cache`) on
the CPU: the same logits as the dynamic cache after prefill, rollback, tree passes and in-place
compaction, and greedy decoding identical to autoregressive decoding through the one loop."""

from __future__ import annotations

import pytest
import torch

from specot.drafting import ModelDrafter, TreeSpec
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate, tree_generate
from specot.models import CausalLM
from specot.sampling import SamplingConfig

from conftest import tiny_llama

PROMPT = [1, 5, 3, 7, 2]


def _pair(seed=0):
    model = tiny_llama(seed, dtype=torch.float64)
    return CausalLM(model, name="dyn"), CausalLM(model, name="static").use_static_cache(64)


def test_static_cache_matches_dynamic_cache_through_rollback_and_trees():
    dyn, sta = _pair()
    for lm in (dyn, sta):
        lm.reset()
    a, b = dyn.logits_after(PROMPT, [4, 6, 8]), sta.logits_after(PROMPT, [4, 6, 8])
    torch.testing.assert_close(a, b)
    # rollback to the prompt + one draft, then a different continuation
    a, b = dyn.logits_after(PROMPT + [4], [9, 9]), sta.logits_after(PROMPT + [4], [9, 9])
    torch.testing.assert_close(a, b)
    # a tree pass, then keep one path in place
    toks, pars = [3, 6, 2, 5], [-1, -1, 0, 1]
    a = dyn.tree_logits_after(PROMPT + [4, 9], toks, pars)
    b = sta.tree_logits_after(PROMPT + [4, 9], toks, pars)
    torch.testing.assert_close(a, b)
    n = len(PROMPT) + 2
    for lm in (dyn, sta):
        lm.keep_tree_path(n, [n + 1, n + 3])  # tokens 6, 5
        assert lm.cached_ids == PROMPT + [4, 9, 6, 5]
    torch.testing.assert_close(dyn.logits_after(PROMPT + [4, 9, 6, 5, 1], [2]),
                               sta.logits_after(PROMPT + [4, 9, 6, 5, 1], [2]))


def test_static_cache_refuses_to_overflow():
    _, sta = _pair()
    with pytest.raises(ValueError, match="static cache"):
        sta.logits_after(list(range(1, 16)) * 5)
    with pytest.raises(ValueError, match="static cache length"):
        sta.use_static_cache(10**9)


@pytest.mark.parametrize("kind", ["chain", "tree"])
def test_greedy_decoding_with_static_caches_equals_autoregressive(kind):
    target = CausalLM(tiny_llama(0, dtype=torch.float32), name="t").use_static_cache(96)
    draft = CausalLM(tiny_llama(1, dtype=torch.float32), name="d").use_static_cache(96)
    cfg = GenerationConfig(max_new_tokens=24, gamma=3, sampling=SamplingConfig(0.0))
    ar = autoregressive_generate(CausalLM(target.model, name="ref"), PROMPT, cfg)
    if kind == "chain":
        res = speculative_generate(target, ModelDrafter(draft), PROMPT, cfg)
    else:
        res = tree_generate(target, draft, PROMPT, TreeSpec.prefix([2, 2, 1], "wor"), cfg, verifier="rrs_wor")
    assert res.tokens == ar.tokens


def test_compiled_passes_never_allocate_the_static_cache():
    """The CUDA-graph path (found on an H100): a static cache allocated inside a captured graph
    becomes a graph output that the next replay overwrites. Prefills must run eagerly, so the
    compiled step only ever sees an allocated cache, and a new sequence reuses the same buffers."""
    target = CausalLM(tiny_llama(0, dtype=torch.float32), name="t").use_static_cache(96)
    seen = []

    def spy(**kwargs):  # stands in for torch.compile(model.forward): records the cache it was given
        cache = kwargs["past_key_values"]
        seen.append((kwargs["input_ids"].shape[1], all(layer.is_initialized for layer in cache.layers), id(cache)))
        return target.model(**kwargs)

    target._compiled = spy
    draft = CausalLM(tiny_llama(1, dtype=torch.float32), name="d")
    cfg = GenerationConfig(max_new_tokens=16, gamma=3, sampling=SamplingConfig(0.0))
    ar = autoregressive_generate(CausalLM(target.model, name="ref"), PROMPT, cfg)
    first = speculative_generate(target, ModelDrafter(draft), PROMPT, cfg)
    second = speculative_generate(target, ModelDrafter(draft), [2] + PROMPT, cfg)
    assert first.tokens == ar.tokens
    assert second.tokens == autoregressive_generate(CausalLM(target.model, name="ref"), [2] + PROMPT, cfg).tokens
    assert seen and all(ok for _, ok, _ in seen)  # no compiled pass met an unallocated cache
    assert all(t <= 4 for t, _, _ in seen)  # the prefills (5 and 6 tokens here) ran eagerly
    assert len({c for _, _, c in seen}) == 1  # one cache, reused across sequences (graph addresses stay valid)
