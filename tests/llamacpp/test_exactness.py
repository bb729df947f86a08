"""Exactness of the one decoding loop on the llama.cpp target.

* Greedy: speculative decoding (n-gram chains, suffix trees, a crafted wide tree) equals the
  backend's own greedy autoregressive decoding token for token except at near-ties, and every
  divergence IS a near-tie (:func:`llamacpp_helpers.check_greedy`: the one-token logits of the
  emitted token's own prefix put it within ``NEAR_TIE`` of their maximum).
* T = 1: the law of the first two tokens matches autoregressive sampling's, computed exactly from
  the backend's one-token logits (seeded chi-square, nominal false-failure rate 1e-3 per test; the
  numerical difference between batched and one-token logits is measured in the test and shown to
  move the statistic by far less than its critical value).
"""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from llamacpp_helpers import FixedTreeDrafter, SampledChainDrafter, check_greedy, greedy_reference
from specot.api import load_drafter
from specot.drafting import TreeSpec
from specot.engine import autoregressive_generate, speculative_generate, tree_generate
from specot.engine.types import GenerationConfig
from specot.geometry import token_tree
from specot.sampling import SamplingConfig
from specot_llamacpp import LlamaCppTarget

pytestmark = pytest.mark.real_model

N_TOKENS = 40


def _greedy(n=N_TOKENS, gamma=3):
    return GenerationConfig(max_new_tokens=n, gamma=gamma, sampling=SamplingConfig(temperature=0.0), seed=0,
                            stop_at_eos=False)


def _top_children(target, k_root=4, k_below=2):
    """A drafter oracle: the children of a node are the backend's top tokens after its path (one-token
    passes of a second target: draft trees of likely tokens, so paths get accepted AND rejected)."""
    oracle = LlamaCppTarget(target.path, tokenizer=target.tokenizer, n_threads=1, n_ctx=2048, max_leaves=1)
    memo: dict[tuple[int, ...], list[int]] = {}

    def children(context, path):
        key = tuple(context) + (-1,) + tuple(path)
        if key not in memo:
            row = oracle.logits_after(list(context) + list(path))[0]
            memo[key] = row.topk(k_root if not path else k_below).indices.tolist()
        return memo[key]
    return oracle, children


@pytest.fixture(scope="module")
def references(target, prompt_ids):
    return [greedy_reference(target, ids, N_TOKENS) for ids in prompt_ids]


@pytest.mark.parametrize("kind", ["ngram", "suffix", "wide-tree"])
def test_greedy_equals_autoregressive_up_to_near_ties(target, prompt_ids, references, kind):
    oracle = None
    ties = 0
    for ids, ref in zip(prompt_ids, references):
        if kind == "ngram":
            out = speculative_generate(target, load_drafter("ngram", target), ids, _greedy()).tokens
        elif kind == "suffix":
            out = tree_generate(target, load_drafter("suffix", target), ids, TreeSpec.sequences(1, 4, "greedy"),
                                _greedy()).tokens
        else:
            if oracle is None:
                oracle, children = _top_children(target)
            drafter = FixedTreeDrafter(target.vocab_size, children, gamma=2)
            out = tree_generate(target, drafter, ids, TreeSpec.prefix([4, 2], "greedy"), _greedy()).tokens
        assert len(out) == N_TOKENS
        ties += check_greedy(target, ids, out, ref)
    if oracle is not None:
        oracle.close()
    assert ties <= 3  # near-ties are rare: a handful in 120 tokens at most


def test_autoregressive_through_the_loop_is_the_reference(target, prompt_ids, references):
    out = autoregressive_generate(target, prompt_ids[0], _greedy()).tokens
    assert out == references[0].tokens


def test_greedy_check_fails_on_misplaced_rows(target, prompt_ids, references, monkeypatch):
    """The greedy check can fail: rows shifted by one (each draft scored with its successor's row)."""
    real = LlamaCppTarget.logits_after

    def shifted(self, context, extra=(), **kw):
        rows = real(self, context, extra, **kw)
        return torch.cat([rows[1:], rows[-1:]]) if len(extra) else rows
    monkeypatch.setattr(LlamaCppTarget, "logits_after", shifted)
    ids = prompt_ids[0]
    out = speculative_generate(target, SampledChainDrafter(target.vocab_size, lambda ctx: _flat(target.vocab_size),
                                                           gamma=3), ids, _greedy()).tokens
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="near-tie"):
        check_greedy(target, ids, out, references[0])


def _flat(V):
    q = torch.zeros(V, dtype=torch.float64)
    q[[28, 253, 314, 330, 1067]] = 0.2
    return q


# ----------------------------------------------------------------------------- T = 1
N_SAMPLES = 600
ALPHA = 1e-3
RAW_PROMPT = "My favourite thing to eat for breakfast is"


def _exact_law(target, ids, top1=6, top2=4):
    """P(x1, x2) of autoregressive sampling at T = 1 from one-token logits, on the categories
    (x1, x2) for the ``top1`` likeliest x1 and the ``top2`` likeliest x2 after each, plus the rest;
    and the law of x1 ``[V]``."""
    target.reset()
    p1 = torch.softmax(target.logits_after(ids)[0].double(), -1)
    cats, probs = [], []
    for x1 in p1.topk(top1).indices.tolist():
        p2 = torch.softmax(target.logits_after(list(ids) + [x1])[0].double(), -1)
        for x2 in p2.topk(top2).indices.tolist():
            cats.append((x1, x2))
            probs.append(float(p1[x1] * p2[x2]))
    return cats, probs, p1


def _chi_square(samples, cats, probs):
    index = {c: i for i, c in enumerate(cats)}
    counts = [0] * (len(cats) + 1)
    for s in samples:
        counts[index.get(tuple(s), len(cats))] += 1
    expected = [p * len(samples) for p in probs] + [(1 - sum(probs)) * len(samples)]
    keep = [i for i, e in enumerate(expected) if e >= 5]
    rest_o = sum(c for i, c in enumerate(counts) if i not in keep)
    rest_e = sum(e for i, e in enumerate(expected) if i not in keep)
    obs = [counts[i] for i in keep] + [rest_o]
    exp = [expected[i] for i in keep] + [rest_e]
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    return stat, len(obs) - 1


class _KeepPrompt(LlamaCppTarget):
    """The target with the prompt's head kept across ``reset`` (many short samples of one prompt);
    the last prompt token and the drafts still run in every sample's first pass."""

    keep = 0

    def reset(self) -> None:
        if len(self._ids) < self.keep or self._ids[:self.keep] != self.prompt_head:
            super().reset()
        else:
            self.rollback(self.keep)


@pytest.mark.parametrize("kind", ["wide-tree", "sampled-chain"])
def test_t1_law_of_the_first_tokens_matches_autoregressive(target, kind):
    sampler = _KeepPrompt(target.path, tokenizer=target.tokenizer, n_threads=1, n_ctx=512, max_leaves=15)
    ids = sampler.tokenizer(RAW_PROMPT)["input_ids"]
    sampler.keep, sampler.prompt_head = len(ids) - 1, list(ids[:-1])
    cats, probs, p1 = _exact_law(target, ids)
    if kind == "wide-tree":  # the likeliest first tokens, two likely continuations each
        oracle, children = _top_children(target, k_root=3, k_below=1)
        drafter = FixedTreeDrafter(target.vocab_size, children, gamma=2)
        spec = TreeSpec.prefix([3, 1], "greedy")
    else:  # drafts from a q that is not p: accept / residual at every node
        oracle, V = None, target.vocab_size
        q = torch.zeros(V, dtype=torch.float64)
        q[[c[0] for c in cats[::4]]] = 0.1
        q[[c[1] for c in cats]] += 0.05
        q /= q.sum()
        drafter = SampledChainDrafter(V, lambda ctx: q, gamma=2)
        spec = None
    cfg = dict(max_new_tokens=2, gamma=2, sampling=SamplingConfig(temperature=1.0), stop_at_eos=False)
    samples = []
    for seed in range(N_SAMPLES):
        c = GenerationConfig(seed=seed, **cfg)
        r = (tree_generate(sampler, drafter, ids, spec, c) if spec is not None
             else speculative_generate(sampler, drafter, ids, c))
        samples.append(r.tokens)
    stat, dof = _chi_square(samples, cats, probs)
    crit = stats.chi2.ppf(1 - ALPHA, dof)
    # how far a batched pass's law of x1 sits from the one-token law: the non-centrality it adds to
    # the statistic (first tokens only; the second token's rows move alike)
    sampler.reset()
    pb = torch.softmax(sampler.tree_logits(ids, token_tree([ids[-1], cats[0][0], cats[4][0]], [-1, 0, 0]))[0].double(), -1)
    firsts = list(dict.fromkeys(c[0] for c in cats))
    rest_a, rest_b = 1 - float(p1[firsts].sum()), 1 - float(pb[firsts].sum())
    shift = N_SAMPLES * (float((((pb[firsts] - p1[firsts]) ** 2) / p1[firsts]).sum()) + (rest_b - rest_a) ** 2 / rest_a)
    sampler.close()
    if oracle is not None:
        oracle.close()
    assert shift < 0.1 * crit, f"batched logits move the law too much for this test (non-centrality {shift:.2f})"
    assert stat < crit, f"chi-square {stat:.1f} >= {crit:.1f} ({dof} dof, alpha {ALPHA})"
