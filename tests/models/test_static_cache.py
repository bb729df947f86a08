"""The static-cache mode of CausalLM (the CUDA-graph path, :meth:`CausalLM.use_static_cache`) on
the CPU: the same logits as the dynamic cache after prefill, rollback, tree passes and in-place
compaction, and greedy decoding identical to autoregressive decoding through the one loop. With
``cuda_graphs`` the passes are padded to :data:`GRAPH_WIDTHS` exactly as on CUDA and run eagerly
here (what a graph replays is that same call over the same buffers), so these tests check the
padding: no real query sees a padding token, the cache's length and positions stay right."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import specot
import specot.plan.run as plan_run
from specot.plan.run import wants_cuda_graphs

from specot.drafting import ModelDrafter, TreeSpec
from specot.geometry import token_tree
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate, tree_generate
from specot.drafting import EAGLE_DEFAULT_TREE, EagleDrafter
from specot.engine import make_generator
from specot.models import CausalLM
from specot.models.hf import GRAPH_WIDTHS, _PaddedPass
from specot.models.protocol import Capabilities
from specot.sampling import SamplingConfig

from model_helpers import tiny_llama

PROMPT = [1, 5, 3, 7, 2]


def _pair(seed=0, graphs=False):
    model = tiny_llama(seed, dtype=torch.float64)
    return CausalLM(model, name="dyn"), CausalLM(model, name="static").use_static_cache(64, cuda_graphs=graphs)


def _spy_padding(monkeypatch, lm):
    """Record (width, cache length before, after, id of the cache) of every padded pass of ``lm``."""
    seen = []
    real = CausalLM._padded_call

    def spy(self, p):
        out = real(self, p)
        if self is lm:
            seen.append((p.ids.shape[1], int(p.lens[0]), int(p.lens[1]), id(self._cache)))
        return out

    monkeypatch.setattr(CausalLM, "_padded_call", spy)
    return seen


@pytest.mark.parametrize("graphs", [False, True])
def test_static_cache_matches_dynamic_cache_through_rollback_and_trees(graphs, monkeypatch):
    dyn, sta = _pair(graphs=graphs)
    seen = _spy_padding(monkeypatch, sta)
    for lm in (dyn, sta):
        lm.reset()
    a, b = dyn.logits_after(PROMPT, [4, 6, 8]), sta.logits_after(PROMPT, [4, 6, 8])
    torch.testing.assert_close(a, b)
    # rollback to the prompt + one draft, then a different continuation
    a, b = dyn.logits_after(PROMPT + [4], [9, 9]), sta.logits_after(PROMPT + [4], [9, 9])
    torch.testing.assert_close(a, b)
    # a tree pass, then keep one path in place
    tree = token_tree([9, 3, 6, 2, 5], [-1, 0, 0, 1, 2])  # root first
    a = dyn.tree_logits(PROMPT + [4, 9], tree)
    b = sta.tree_logits(PROMPT + [4, 9], tree)
    torch.testing.assert_close(a, b)
    for lm in (dyn, sta):
        lm.keep_tree_path([2, 4])  # tokens 6, 5
        assert lm.cached_ids == PROMPT + [4, 9, 6, 5]
    torch.testing.assert_close(dyn.logits_after(PROMPT + [4, 9, 6, 5, 1], [2]),
                               sta.logits_after(PROMPT + [4, 9, 6, 5, 1], [2]))
    # the prefill ran plain, the rest padded: 3 new tokens -> 4, the tree (1 context token + 4 nodes) -> 8, 2 -> 2
    assert [w for w, *_ in seen] == ([4, 8, 2] if graphs else [])


def test_static_cache_refuses_to_overflow():
    _, sta = _pair()
    with pytest.raises(ValueError, match="static cache"):
        sta.logits_after(list(range(1, 16)) * 5)
    with pytest.raises(ValueError, match="static cache length"):
        sta.use_static_cache(10**9)


@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("kind", ["chain", "tree"])
def test_greedy_decoding_with_static_caches_equals_autoregressive(kind, graphs):
    target = CausalLM(tiny_llama(0, dtype=torch.float32), name="t").use_static_cache(160, cuda_graphs=graphs)
    draft = CausalLM(tiny_llama(1, dtype=torch.float32), name="d").use_static_cache(160, cuda_graphs=graphs)
    cfg = GenerationConfig(max_new_tokens=24, gamma=3, sampling=SamplingConfig(0.0))
    ar = autoregressive_generate(CausalLM(target.model, name="ref"), PROMPT, cfg)
    if kind == "chain":
        res = speculative_generate(target, ModelDrafter(draft), PROMPT, cfg)
    else:
        res = tree_generate(target, draft, PROMPT, TreeSpec.prefix([2, 2, 1], "wor"), cfg, verifier="rrs_wor")
    assert res.tokens == ar.tokens


@pytest.mark.parametrize("kind", ["chain", "tree"])
def test_eagle_reads_the_same_features_through_padded_passes(kind):
    """An EAGLE drafter reads the target's hidden states from the padded passes: greedy output is
    autoregressive decoding, and at T = 1 the same generator draws the same tokens as over a plain
    dynamic cache (the padding changes no real row)."""
    model = tiny_llama(0, dtype=torch.float64, layers=4)
    plain = CausalLM(model, name="plain")
    padded = CausalLM(model, name="padded").use_static_cache(160, cuda_graphs=True)
    spec = TreeSpec.topology(EAGLE_DEFAULT_TREE, "greedy") if kind == "tree" else None

    def run(target, temperature):
        drafter = EagleDrafter.random(target, draft_vocab=[1, 2, 3, 5, 7, 8, 9, 11, 12, 14], seed=1, scale=5.0)
        cfg = GenerationConfig(max_new_tokens=30, gamma=3, sampling=SamplingConfig(temperature), stop_at_eos=False)
        gen = make_generator(7)
        if spec is None:
            return speculative_generate(target, drafter, PROMPT, cfg, generator=gen)
        return tree_generate(target, drafter, PROMPT, spec, cfg, verifier="greedy", generator=gen)

    assert run(padded, 0.0).tokens == autoregressive_generate(plain, PROMPT, GenerationConfig(
        max_new_tokens=30, sampling=SamplingConfig(0.0), stop_at_eos=False)).tokens
    a, b = run(plain, 1.0), run(padded, 1.0)
    assert a.tokens == b.tokens and a.stats.accepted == b.stats.accepted > 0


def test_padded_passes_never_allocate_the_static_cache_and_keep_its_length(monkeypatch):
    """The CUDA-graph path (found on an H100): a static cache allocated inside a captured graph
    becomes a graph output that the next replay overwrites. Prefills run plain, so every padded
    pass meets an allocated cache; a new sequence reuses the same buffers; each pass is padded to
    the smallest width that holds it and leaves the cache at the real length, not the padded one."""
    target = CausalLM(tiny_llama(0, dtype=torch.float32), name="t").use_static_cache(160, cuda_graphs=True)
    seen = _spy_padding(monkeypatch, target)
    lengths = []
    real_forward = CausalLM.forward

    def forward(self, tokens, **kw):
        out = real_forward(self, tokens, **kw)
        if self is target:
            lengths.append((len(tokens), int(self._cache.get_seq_length()), len(self.cached_ids)))
        return out

    monkeypatch.setattr(CausalLM, "forward", forward)
    draft = CausalLM(tiny_llama(1, dtype=torch.float32), name="d")
    cfg = GenerationConfig(max_new_tokens=16, gamma=3, sampling=SamplingConfig(0.0))
    first = speculative_generate(target, ModelDrafter(draft), PROMPT, cfg)
    second = speculative_generate(target, ModelDrafter(draft), [2] + PROMPT, cfg)
    assert first.tokens == autoregressive_generate(CausalLM(target.model, name="ref"), PROMPT, cfg).tokens
    assert second.tokens == autoregressive_generate(CausalLM(target.model, name="ref"), [2] + PROMPT, cfg).tokens
    assert seen and all(w in GRAPH_WIDTHS and before > 0 for w, before, _, _ in seen)
    assert all(after - before <= w and (after - before) * 2 > w or w == 1 for w, before, after, _ in seen)
    assert len({c for *_, c in seen}) == 1  # one cache, reused across sequences (graph addresses stay valid)
    assert len(seen) == sum(1 for t, _, _ in lengths if t <= GRAPH_WIDTHS[-1]) - 2  # all but the two prefills
    assert all(cache_len == ids for _, cache_len, ids in lengths)  # the real length, never the padded one


def test_padding_falls_back_to_plain_passes_without_room(monkeypatch):
    """A pass whose padded width would overrun the static cache runs unpadded: still exact."""
    dyn, sta = _pair(graphs=True)
    seen = _spy_padding(monkeypatch, sta)
    ctx = list(range(1, 16)) * 4  # 60 of the 64 slots
    a, b = dyn.logits_after(ctx[:-3], [1, 2, 3]), sta.logits_after(ctx[:-3], [1, 2, 3])
    torch.testing.assert_close(a, b)
    a, b = dyn.logits_after(ctx + [4], [5, 6]), sta.logits_after(ctx + [4], [5, 6])  # 3 new tokens at 60: 4 > room
    torch.testing.assert_close(a, b)
    assert seen == []


def test_generate_turns_graphs_on_for_cuda_only_unless_asked():
    """``specot.generate(cuda_graphs=None)`` decodes over plain caches off CUDA; ``True`` pads the
    passes here too, and greedy output is still autoregressive decoding."""
    target = CausalLM(tiny_llama(0, dtype=torch.float32), name="t")
    kw = dict(target=target, draft="ngram", ngram_corpus=None, temperature=0.0, max_new_tokens=16, gamma=3,
              baseline=True)
    plain = specot.generate(PROMPT * 3, **kw)
    assert not plain.cuda_graphs and target.static_cache_len is None and target._graphs is None
    padded = specot.generate(PROMPT * 3, cuda_graphs=True, **kw)
    assert padded.cuda_graphs and padded.to_dict()["cuda_graphs"] and target._graphs
    assert padded.result.tokens == padded.baseline.tokens == plain.result.tokens
    # the target keeps its padded passes (and captured graphs) across calls, and the report says so
    assert specot.generate(PROMPT * 3, cuda_graphs=False, **kw).cuda_graphs


def test_graphs_by_default_only_on_cuda_and_for_architectures_with_static_caches():
    def lm(device, can):
        return SimpleNamespace(device=torch.device(device), capabilities=Capabilities(static_cache=True, cuda_graphs=can))

    assert wants_cuda_graphs("auto", lm("cuda", True))
    assert not wants_cuda_graphs("auto", lm("cuda", False))  # e.g. a model with its own cache type
    assert not wants_cuda_graphs("auto", lm("cpu", True))
    assert wants_cuda_graphs("cuda_graphs", lm("cpu", False)) and not wants_cuda_graphs("dynamic", lm("cuda", True))


def test_baseline_runs_capture_the_graphs_before_timing_without_changing_the_output(monkeypatch):
    """With graphs and ``baseline``, ``generate`` decodes a short untimed warm-up first (so the timed
    speculative run does not pay the captures the baseline then reuses), on its own generator: the
    sampled output is the one a call without the baseline gives."""
    target = CausalLM(tiny_llama(0, dtype=torch.float32), name="t")
    calls = []
    real = plan_run.speculative_generate

    def spy(*a, **kw):
        calls.append(kw.get("on_tokens"))
        return real(*a, **kw)

    monkeypatch.setattr(plan_run, "speculative_generate", spy)
    kw = dict(target=target, draft="ngram", ngram_corpus=None, temperature=1.0, max_new_tokens=24, gamma=3, seed=5,
              cuda_graphs=True)
    alone = specot.generate(PROMPT * 3, **kw)
    assert len(calls) == 1
    timed = specot.generate(PROMPT * 3, baseline=True, **kw)
    assert len(calls) == 3 and calls[1] is None  # the warm-up streams nothing
    assert timed.result.tokens == alone.result.tokens


def test_a_failed_capture_warns_and_falls_back_to_plain_passes(monkeypatch):
    """Capture itself needs CUDA; its failure path does not: one warning naming the width, graphs
    off from then on, the cache's length restored, and the plain passes that follow still exact."""
    lm = CausalLM(tiny_llama(0, dtype=torch.float64), name="t").use_static_cache(64, cuda_graphs=True)
    lm.logits_after(PROMPT)  # the prefill allocates the cache
    p = _PaddedPass.empty(4, 64, lm.dtype, lm.device, False)

    def no_stream(*a, **k):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(torch.cuda, "Stream", no_stream)
    with pytest.warns(RuntimeWarning, match="capturing a CUDA graph of a 4-token pass failed.*running eagerly"), \
            torch.inference_mode():  # as inside CausalLM.forward, which calls it
        assert lm._capture(p, len(PROMPT) - 1) is False
    assert not lm.cuda_graphs and int(lm._cache.get_seq_length()) == len(PROMPT) - 1
    del lm._cached_ids[len(PROMPT) - 1:]  # as the caller's rollback would
    dyn = CausalLM(lm.model, name="dyn")
    torch.testing.assert_close(lm.logits_after(PROMPT + [4], [6, 8]), dyn.logits_after(PROMPT + [4], [6, 8]))
