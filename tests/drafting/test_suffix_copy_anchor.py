"""The copy anchor of the suffix drafter's copy model: after the target leaves a verified copy (an
edit), the source is drafted again from where it stopped — resync, insertion and replacement
continuations, each its own learned copy-rate bucket — and the output's law is unchanged."""

from __future__ import annotations

import random

import pytest
import torch

from specot.calibration import PassCostCurve
from specot.drafting import DraftOutcome, SuffixDrafter, TreeBudget
from specot.drafting.copy import ALIGN_KINDS, ALIGN_PRIOR, COPY_EDGES, CopyAnchor
from specot.engine import GenerationConfig, autoregressive_generate, make_generator, tree_generate
from specot.laws import DraftLaw
from specot.sampling import SamplingConfig

from engine_helpers import chain_path, chi_square_pvalue, exact_joint
from model_helpers import tiny_lm

ALPHA = 1e-4  # significance level of the chi-square test (seed fixed: deterministic)
T0 = SamplingConfig(temperature=0.0)
# a cheap wide pass: r(B) = 1 + 0.1·(B - 1), so a guess right half the time pays for a draft
CHEAP = PassCostCurve.from_ratios(range(1, 12), [1 + 0.1 * (b - 1) for b in range(1, 12)], source="test")
NEW = 0  # a token the source never holds (sources draw from 1..63)


def _text(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 64) for _ in range(n)]


def _drafter(anchor: bool = True) -> SuffixDrafter:
    d = SuffixDrafter(vocab_size=64, children=1, min_n=4, pass_cost=CHEAP, copy_model=True, copy_anchor=anchor)
    d.start([0], TreeBudget(children=1, gamma=8, law=DraftLaw.GREEDY))
    return d


def _copy_then_edit(d: SuffixDrafter, src: list[int], accepted: int, edit: int = NEW) -> list[int]:
    """Propose while the context ends with a 30-token copy of ``src``; the target accepts
    ``accepted`` drafts, then writes ``edit`` where the source goes on. Returns the new context."""
    ctx = src + _text(10, 9) + src[:30]
    tree = d.propose(ctx, 8, T0)
    path = chain_path(tree)
    assert len(path) > accepted
    toks = tuple(tree.tokens[n] for n in path[:accepted]) + (edit,)
    d.update(DraftOutcome(tree=tree, path=tuple(path[:accepted]), tokens=toks, context_len=len(ctx)))
    return ctx + list(toks)


def test_anchor_offers_resync_insert_and_replace_near_where_the_copy_stopped():
    seq = [5, 6, 7, 8, 9, 10, 11, 12] + [20, 21]  # source 0..7, then two new tokens
    a = CopyAnchor(window=8, horizon=4)
    a.observe(seq[:9], next_source=3, stopped_at=8, accepted=2, match=20)  # the copy would emit seq[3] = 8; 20 came
    assert a.source == 3 and a.stopped_at == 8
    assert a.starts(seq[:9]) == [(3, 1), (4, 2)]  # k = 1: no resync (20 not in the source), insert, replace
    assert a.starts(seq[:9] + [10]) == [(6, 0), (3, 1), (4, 2)]  # 10 is seq[5]: resume after it
    assert a.starts(seq + [1]) == []  # k = 3, nothing to resync with, no guesses past k = 2
    assert a.source == 3
    assert a.starts(seq + [1, 1, 1]) == [] and a.source is None  # past the horizon: dropped
    a.observe(seq[:9], next_source=3, stopped_at=8, accepted=0, match=20)
    a.observe(seq[:9] + [21], next_source=3, stopped_at=9, accepted=0, match=20)  # its own guess failed: kept
    assert a.stopped_at == 8
    a.observe([5, 6, 7, 8, 6], next_source=1, stopped_at=4, accepted=1, match=20)  # the source's token came
    assert a.source is None
    a.observe(seq[:9], next_source=3, stopped_at=8, accepted=2, match=a.min_match - 1)  # too short a copy
    assert a.source is None


def test_an_insertion_is_drafted_again_at_once_and_without_the_anchor_nothing_is():
    src = _text(60, 0)
    with_anchor, without = _drafter(), _drafter(anchor=False)
    ctx = _copy_then_edit(with_anchor, src, accepted=2)
    assert _copy_then_edit(without, src, accepted=2) == ctx
    assert without.propose(ctx, 8, T0).size == 0  # NEW matches nothing: no draft for 4 tokens
    tree = with_anchor.propose(ctx, 8, T0)
    assert tree.size >= 3
    assert [tree.tokens[n] for n in chain_path(tree)] == src[32:32 + tree.size]  # the source after the edit


def test_the_anchor_is_drafted_also_when_the_occurrences_read_reach_their_cap():
    """A context whose last token occurs often: max_occurrences ends the scan of the suffix's
    occurrences, and the anchor's continuation still joins the trie."""
    src = _text(60, 0)
    d = SuffixDrafter(vocab_size=64, children=1, min_n=1, pass_cost=CHEAP, copy_model=True, copy_anchor=True,
                      max_occurrences=1)
    d.start([0], TreeBudget(children=1, gamma=8, law=DraftLaw.GREEDY))
    ctx = _copy_then_edit(d, src, accepted=2, edit=src[5])  # a token the source holds: the scan finds it
    assert src[5] != src[32] and d.anchor.starts(ctx)
    tree = d.propose(ctx, 8, T0)
    assert [tree.tokens[n] for n in chain_path(tree)][:3] == src[32:35]  # the insertion guess drafted


def test_a_wrong_guess_lowers_its_own_bucket_and_the_value():
    src = _text(60, 1)
    d = _drafter()
    ctx = _copy_then_edit(d, src, accepted=1)
    insert = len(COPY_EDGES) + ALIGN_KINDS.index("insert")
    before = d._copy_n[insert], d._copy_acc[insert]
    first = d.propose(ctx, 8, T0)
    value = d.expected_value()
    assert first.size > 0 and value > 1.0
    d.update(DraftOutcome(tree=first, path=(), tokens=(NEW,), context_len=len(ctx)))  # the guess rejected
    assert d._copy_n[insert] == pytest.approx(before[0] + 1.0) and d._copy_acc[insert] == before[1]
    assert d.anchor is not None and d.anchor.stopped_at == len(ctx) - 1  # still where the copy stopped
    ctx = ctx + [NEW]
    again = d.propose(ctx, 8, T0)
    assert again.size <= first.size and d.expected_value() < value


def test_prior_rows_and_option_checked():
    for row in ALIGN_PRIOR.values():
        assert len(row) == len(ALIGN_KINDS) and all(0 < h < 1 for h in row)
    assert SuffixDrafter(vocab_size=8, copy_anchor=True).anchor is None  # only with the copy model
    from specot.plan import make_plan
    with pytest.raises(ValueError, match="suffix_copy_anchor"):
        make_plan("suffix", suffix_copy_anchor="yes")


PROMPT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 3, 1, 4, 1, 6, 9, 2, 6, 5, 3]  # a copy with edits


def _anchored(vocab: int, fired: list | None = None) -> SuffixDrafter:
    """An anchored drafter; ``fired`` collects the anchor's non-empty continuations."""
    d = SuffixDrafter(vocab_size=vocab, children=1, min_n=2, copy_model=True, copy_anchor=True, pass_cost=CHEAP)
    d.anchor.min_match = 2  # a tiny model's copies are short
    if fired is not None:
        starts = d.anchor.starts

        def recorded(seq):
            got = starts(seq)
            if got:
                fired.append(got)
            return got
        d.anchor.starts = recorded
    return d


def test_greedy_identical_to_autoregressive():
    target = tiny_lm(0, vocab=16, dtype=torch.float32)
    cfg = GenerationConfig(max_new_tokens=40, sampling=T0)
    ar = autoregressive_generate(target, PROMPT, cfg)
    fired: list = []
    sd = tree_generate(target, _anchored(16, fired), PROMPT, TreeBudget(children=1, gamma=8, law=DraftLaw.GREEDY), cfg)
    assert sd.tokens == ar.tokens and sd.stats.drafted > 0 and fired  # the anchor offered continuations


def test_sampling_is_lossless_chi_square():
    """Law of 3-token continuations with anchored chains == the exact joint (false-failure rate 1e-4)."""
    V = 8
    prompt = [1, 2, 3, 4, 5, 1, 2, 3, 6, 5, 1, 2, 3]
    target = tiny_lm(1, vocab=V, dtype=torch.float32)
    sampling = SamplingConfig(1.0)
    exact = exact_joint(target.model, prompt, 3, sampling)
    gen = make_generator(2028)
    cfg = GenerationConfig(max_new_tokens=3, sampling=sampling, stop_at_eos=False)
    spec = TreeBudget(children=1, gamma=2, law=DraftLaw.GREEDY)
    samples, drafted, fired = [], 0, []
    for _ in range(1200):
        res = tree_generate(target, _anchored(V, fired), prompt, spec, cfg, generator=gen)
        samples.append(tuple(res.tokens))
        drafted += res.stats.drafted
    assert drafted > 0 and fired
    assert chi_square_pvalue(samples, exact) > ALPHA
