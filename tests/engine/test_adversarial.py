"""Adversarial tests of exactness: each one fails on a plausible bug.

* one shared random stream for drafting and verification must not bias the output law;
* the q handed to the verifier is the law the draft was sampled from, after top-k / top-p;
* a recovered token is inside the vocabulary for V not a multiple of 8/16/128;
* NaN logits and placeholder draft ids (−1) are refused with a clear ValueError;
* every emitted token respects the target's top-k / top-p mask;
* the seed changes the output and the same seed reproduces it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from model_helpers import tiny_lm
from specot.drafting import ModelDrafter
from specot.drafting.ngram import NGramDrafter
from specot.engine import GenerationConfig, speculative_generate
from specot.laws import sample_drafts
from specot.sampling import SamplingConfig, sample_categorical, standardize
from specot.verifiers import Verifier, available_verifiers, get_verifier

P6 = torch.tensor([0.30, 0.25, 0.20, 0.10, 0.10, 0.05], dtype=torch.float64)
Q6 = torch.tensor([0.05, 0.10, 0.10, 0.20, 0.25, 0.30], dtype=torch.float64)


def chi2_pvalue(tokens: torch.Tensor, p: torch.Tensor) -> float:
    counts = np.bincount(tokens.numpy(), minlength=p.numel())
    return float(scipy.stats.chisquare(counts, p.numpy() * counts.sum()).pvalue)


# --------------------------------------------------------------------------- one shared generator
@pytest.mark.parametrize("name,law,n", [("speculative", "iid", 1), ("kseq", "iid", 3), ("rrs", "iid", 3),
                                        ("rrs_wor", "wor", 3), ("greedy", "greedy", 3), ("spechub", "spechub", 2)])
def test_shared_generator_batched_output_law_is_p(name, law, n):
    N = 20_000
    g = torch.Generator().manual_seed(1234)
    p, q = P6.expand(N, -1).contiguous(), Q6.expand(N, -1).contiguous()
    drafts = sample_drafts(q, n, law, g)  # drafts and verification draw from the same g
    out = get_verifier(name).verify(p, q, drafts, g).tokens
    assert chi2_pvalue(out, P6) > 1e-3


def test_shared_generator_interleaved_output_law_is_p():
    """Draft, verify, draft, verify, ... from one generator, as the engine does."""
    g = torch.Generator().manual_seed(7)
    ver = get_verifier("speculative")
    out = []
    for _ in range(4000):
        d = sample_drafts(Q6[None], 1, "iid", g)
        out.append(int(ver.verify(P6[None], Q6[None], d, g).tokens[0]))
    assert chi2_pvalue(torch.tensor(out), P6) > 1e-3


def test_chi_square_detects_a_reused_uniform():
    """Control: the test above has power. Reusing the draft's uniform for the accept test biases
    the output (accept iff u < p(x)/q(x) with x = F_q^{-1}(u)); the chi-square must reject it."""
    N = 20_000
    g = torch.Generator().manual_seed(1234)
    u = torch.rand(N, generator=g, dtype=torch.float64)
    q = Q6.expand(N, -1)
    x = sample_categorical(q, uniforms=u)
    accept = u < (P6[x] / Q6[x])
    residual = (P6 - Q6).clamp_min(0)
    rec = sample_categorical(residual.expand(N, -1), g)
    out = torch.where(accept, x, rec)
    assert chi2_pvalue(out, P6) < 1e-6


# --------------------------------------------------------------------------- q after top-k / top-p
def _rows(tree):
    """(prefix tokens, q row, drafted children) per expanded node of a proposal."""
    if hasattr(tree, "q_row"):  # a DraftTree
        for node, row in tree.q_row.items():
            yield tree.path_tokens(node), tree.q[row], tree.drafts[node]
    else:  # a chain proposal with .tokens / .q
        for i, t in enumerate(tree.tokens):
            yield list(tree.tokens[:i]), tree.q[i], [t]


@pytest.mark.parametrize("cfg", [SamplingConfig(1.0, top_k=3), SamplingConfig(0.8, top_p=0.6),
                                 SamplingConfig(1.3, top_k=5, top_p=0.9)])
def test_draft_q_is_the_law_the_draft_was_sampled_from(cfg):
    drafter = ModelDrafter(tiny_lm(1))
    ref = tiny_lm(1)
    ctx = [1, 2, 3]
    seen = 0
    for seed in range(5):
        tree = drafter.propose(ctx, 4, cfg, torch.Generator().manual_seed(seed))
        for prefix, q, children in _rows(tree):
            expect = standardize(ref.logits_after(ctx + prefix)[-1:], cfg)[0]
            torch.testing.assert_close(q.to(torch.float64), expect.to(torch.float64), atol=1e-5, rtol=0)
            if cfg.top_k:
                assert int((q > 0).sum()) <= cfg.top_k  # zero mass outside top-k
            for c in children:
                assert q[c] > 0, f"drafted token {c} has q = 0"
            seen += 1
    assert seen >= 10


# --------------------------------------------------------------------------- vocabulary edges
@pytest.mark.parametrize("V", [49153, 7, 1])
def test_recovered_token_is_inside_the_vocabulary(V):
    g = torch.Generator().manual_seed(0)
    # disjoint supports: the draft (token 0) is always rejected, the residual is p itself
    p = torch.zeros(1, V)
    p[0, V - 1] = 1.0
    q = torch.zeros(1, V)
    q[0, 0] = 1.0
    if V == 1:  # one token: p = q, always accepted
        out = get_verifier("speculative").verify(p, q, torch.zeros(1, 1, dtype=torch.int64), g)
        assert out.tokens.tolist() == [0]
        return
    for name in ("speculative", "kseq", "rrs"):
        out = get_verifier(name).verify(p, q, torch.zeros(1, 1, dtype=torch.int64), g)
        assert out.tokens.tolist() == [V - 1] and out.accepted_index.tolist() == [-1], name
    # random dense p, q in float32: every emitted token is a valid id
    pr = torch.softmax(torch.randn(64, V, generator=g) * 3, -1)
    qr = torch.softmax(torch.randn(64, V, generator=g) * 3, -1)
    for name, law, n in (("speculative", "iid", 1), ("kseq", "iid", 2), ("rrs_wor", "wor", 2)):
        d = sample_drafts(qr, n, law, g)
        tok = get_verifier(name).verify(pr, qr, d, g).tokens
        assert int(tok.min()) >= 0 and int(tok.max()) < V, name


@pytest.mark.parametrize("cfg", [SamplingConfig(), SamplingConfig(0.0), SamplingConfig(1.0, top_k=2),
                                 SamplingConfig(0.7, top_p=0.5)])
def test_nan_logits_raise_a_clear_error(cfg):
    with pytest.raises(ValueError, match="NaN"):
        standardize(torch.full((2, 7), math.nan), cfg)
    x = torch.zeros(1, 7)
    x[0, 3] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        standardize(x, cfg)


def _token_level_verifiers():
    out = []
    for name in available_verifiers():
        v = get_verifier(name, lenience=0.5) if name == "lenient" else get_verifier(name)
        if isinstance(v, Verifier):
            out.append((name, v))
    return out


def test_placeholder_draft_id_is_refused():
    p = P6[None].clone()
    q = Q6[None].clone()
    names = []
    for name, v in _token_level_verifiers():
        with pytest.raises(ValueError, match="placeholder|outside"):
            v.verify(p, q, torch.tensor([[-1]]), torch.Generator().manual_seed(0))
        names.append(name)
    assert "speculative" in names and "kseq" in names
    with pytest.raises(ValueError, match="placeholder"):
        get_verifier("speculative").verify(p, q, torch.tensor([[-1]]))


# --------------------------------------------------------------------------- masks and seeds in the engine
def _emitted_within_mask(cfg: SamplingConfig, drafter, seeds=range(3), n_tokens=20):
    target, ref = tiny_lm(0), tiny_lm(0)
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    checked = 0
    for seed in seeds:
        res = speculative_generate(target, drafter, prompt, GenerationConfig(max_new_tokens=n_tokens, gamma=3,
                                                                             seed=seed, sampling=cfg))
        ctx = list(prompt)
        for tok in res.tokens:
            allowed = standardize(ref.logits_after(ctx)[-1:], cfg)[0] > 0
            assert allowed[tok], f"token {tok} outside the target's mask at prefix length {len(ctx)}"
            ctx.append(tok)
            checked += 1
    assert checked >= 20


def test_every_token_within_target_top_k():
    _emitted_within_mask(SamplingConfig(1.0, top_k=2), ModelDrafter(tiny_lm(1)))


def test_every_token_within_target_top_p_with_ngram_drafts():
    # prompt-lookup drafts are deterministic and ignore the mask: verification must filter them
    _emitted_within_mask(SamplingConfig(1.0, top_p=0.5), NGramDrafter(n=2))
    _emitted_within_mask(SamplingConfig(1.0, top_k=2), NGramDrafter(n=2), seeds=range(2))


def test_seed_changes_output_and_same_seed_reproduces():
    target, draft = tiny_lm(0), tiny_lm(1)
    cfg = SamplingConfig(1.0)

    def run(seed):
        return speculative_generate(target, ModelDrafter(draft), [1, 2, 3],
                                    GenerationConfig(max_new_tokens=16, gamma=3, seed=seed, sampling=cfg)).tokens

    first = run(0)
    assert run(0) == first
    others = [run(s) for s in (1, 2, 3)]
    assert any(o != first for o in others)
    assert len({tuple(o) for o in [first, *others]}) >= 3
