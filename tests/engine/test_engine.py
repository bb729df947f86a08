"""The speculative decoding engine (Leviathan Algorithm 1) on tiny random Llama models."""

from __future__ import annotations

import pytest
import torch

from specot.drafting import ModelDrafter, NGramDrafter, NGramTable, SuffixDrafter, TreeSpec
from specot.drafting import DraftSchedule
from specot.engine import GenerationConfig, autoregressive_generate, make_generator, speculative_generate, tree_generate
from specot.models import CausalLM
from specot.sampling import SamplingConfig
from specot.verifiers import LenientVerifier, get_verifier

from model_helpers import tiny_lm, tiny_llama
from engine_helpers import chi_square_pvalue, exact_joint

PROMPT = [1, 5, 3, 7]
GREEDY = SamplingConfig(temperature=0.0)

# Significance level of every chi-square test below: with the seeds fixed the tests are
# deterministic; were the seeds drawn at random, each would fail wrongly with probability 1e-4.
ALPHA = 1e-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("drafter_kind", ["model", "ngram", "self"])
@pytest.mark.parametrize("schedule", ["constant", "heuristic"])
def test_greedy_identical_to_autoregressive(dtype, gamma, drafter_kind, schedule):
    target = tiny_lm(0, dtype=dtype)
    if drafter_kind == "model":
        drafter = ModelDrafter(tiny_lm(1, dtype=dtype))
    elif drafter_kind == "self":  # a second wrapper on the target: everything is accepted
        drafter = ModelDrafter(CausalLM(target.model, name="self"))
    else:
        table = NGramTable.from_token_sequences([[1, 5, 3, 7, 2, 9, 4, 4, 1, 5, 3, 8]], n=2)
        drafter = NGramDrafter(n=2, table=table)
    cfg = GenerationConfig(max_new_tokens=24, gamma=gamma, sampling=GREEDY, gamma_schedule=schedule)
    ar = autoregressive_generate(target, PROMPT, cfg)
    sd = speculative_generate(target, drafter, PROMPT, cfg)
    assert sd.tokens == ar.tokens
    assert len(sd.tokens) == 24
    if drafter_kind == "self" and schedule == "constant":
        assert sd.stats.accepted == sd.stats.drafted
        assert sd.stats.target_calls == -(-24 // (gamma + 1))


def _sample_many(target, drafter, sampling, n_samples, gamma, length=3, verifier=None, seed=1234):
    gen = make_generator(seed)
    cfg = GenerationConfig(max_new_tokens=length, gamma=gamma, sampling=sampling, stop_at_eos=False)
    return [tuple(speculative_generate(target, drafter, PROMPT, cfg, generator=gen, verifier=verifier).tokens)
            for _ in range(n_samples)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "sampling,gamma,drafter_kind",
    [
        (SamplingConfig(1.0), 2, "model"),
        (SamplingConfig(0.8, top_k=5, top_p=0.9), 3, "model"),
        (SamplingConfig(1.0), 2, "ngram"),
    ],
)
def test_sampling_is_lossless_chi_square(sampling, gamma, drafter_kind):
    """Empirical law of 3-token continuations == the EXACT autoregressive joint (enumerated)."""
    V = 8
    target = tiny_lm(0, vocab=V)
    if drafter_kind == "model":
        drafter = ModelDrafter(tiny_lm(1, vocab=V))
    else:
        drafter = NGramDrafter(n=1, table=NGramTable.from_token_sequences([[i, (i * 3 + 1) % V] for i in range(V)], n=1))
    exact = exact_joint(target.model, PROMPT, 3, sampling)
    samples = _sample_many(target, drafter, sampling, 1500, gamma)
    assert chi_square_pvalue(samples, exact) > ALPHA


def test_heuristic_gamma_schedule():
    sched = DraftSchedule(3, "heuristic")
    sched.update(3, 3)
    assert sched.current == 5
    sched.update(5, 5)
    assert sched.current == 6  # capped at 2γ
    sched.update(6, 1)
    assert sched.current == 5
    sched.update(0, 0)
    assert sched.current == 5  # nothing drafted: unchanged
    const = DraftSchedule(3)
    const.update(3, 3)
    assert const.current == 3
    with pytest.raises(ValueError, match="gamma_schedule"):
        GenerationConfig(gamma_schedule="fast")
    with pytest.raises(ValueError, match="schedule"):
        DraftSchedule(3, "fast")


@pytest.mark.slow
def test_heuristic_schedule_is_lossless_chi_square():
    V = 8
    target, drafter = tiny_lm(0, vocab=V), ModelDrafter(tiny_lm(1, vocab=V))
    sampling = SamplingConfig(1.0)
    exact = exact_joint(target.model, PROMPT, 3, sampling)
    gen = make_generator(99)
    cfg = GenerationConfig(max_new_tokens=3, gamma=1, sampling=sampling, stop_at_eos=False, gamma_schedule="heuristic")
    samples = [tuple(speculative_generate(target, drafter, PROMPT, cfg, generator=gen).tokens) for _ in range(1500)]
    assert chi_square_pvalue(samples, exact) > ALPHA


@pytest.mark.slow
def test_chi_square_detects_a_wrong_verifier():
    """The statistic has power: lenient verification (lossy) is rejected by the same test."""
    V = 8
    target, drafter = tiny_lm(0, vocab=V), ModelDrafter(tiny_lm(1, vocab=V))
    exact = exact_joint(target.model, PROMPT, 3, SamplingConfig(1.0))
    samples = _sample_many(target, drafter, SamplingConfig(1.0), 1500, 2, verifier=LenientVerifier(0.3))
    assert chi_square_pvalue(samples, exact) < ALPHA


def test_seeded_runs_are_reproducible(tiny_target, tiny_draft):
    cfg = GenerationConfig(max_new_tokens=30, gamma=3, sampling=SamplingConfig(1.0), seed=7)
    a = speculative_generate(tiny_target, ModelDrafter(tiny_draft), PROMPT, cfg)
    b = speculative_generate(tiny_target, ModelDrafter(tiny_draft), PROMPT, cfg)
    assert a.tokens == b.tokens
    c = speculative_generate(tiny_target, ModelDrafter(tiny_draft), PROMPT,
                             GenerationConfig(max_new_tokens=30, gamma=3, sampling=SamplingConfig(1.0), seed=8))
    assert c.tokens != a.tokens


@pytest.mark.parametrize("max_new", [1, 2, 7, 13])
def test_stops_at_exactly_max_new_tokens(max_new, tiny_target):
    drafter = ModelDrafter(CausalLM(tiny_target.model, name="self"))
    cfg = GenerationConfig(max_new_tokens=max_new, gamma=4, sampling=SamplingConfig(1.0))
    res = speculative_generate(tiny_target, drafter, PROMPT, cfg)
    assert len(res.tokens) == max_new == res.stats.new_tokens


def test_stops_at_eos_and_never_emits_after_it():
    eos = 3
    model = tiny_llama(0, eos=eos)
    target = CausalLM(model, name="t")
    drafter = ModelDrafter(CausalLM(model, name="self"))  # accepts whole blocks: EOS lands mid-block
    gen = make_generator(0)
    hits = 0
    for _ in range(30):
        cfg = GenerationConfig(max_new_tokens=30, gamma=5, sampling=SamplingConfig(1.5))
        res = speculative_generate(target, drafter, PROMPT, cfg, generator=gen)
        if eos in res.tokens:
            hits += 1
            assert res.tokens.index(eos) == len(res.tokens) - 1
        else:
            assert len(res.tokens) == 30
    assert hits > 0


def test_stats_are_consistent(tiny_target, tiny_draft):
    cfg = GenerationConfig(max_new_tokens=50, gamma=4, sampling=SamplingConfig(1.0))
    st = speculative_generate(tiny_target, ModelDrafter(tiny_draft), PROMPT, cfg).stats
    assert st.new_tokens == 50
    assert st.target_calls == st.iterations
    assert st.block_efficiency == pytest.approx(50 / st.target_calls)
    assert st.accepted + st.iterations >= 50  # every iteration emits accepted drafts + one token (the last may be cut)
    assert st.tried_at[0] >= st.tried_at[-1]
    assert st.accepted_per_drafted == pytest.approx(st.accepted / st.drafted) and st.tokens_per_s > 0
    assert st.to_dict()["block_efficiency"] == st.block_efficiency
    assert st.to_dict()["accepted_per_drafted"] == st.accepted_per_drafted and "acceptance_rate" not in st.to_dict()


def test_accepted_per_drafted_has_one_name():
    from specot.engine import GenerationStats

    st = GenerationStats(drafted=8, accepted=2)
    assert st.accepted_per_drafted == 0.25 and not hasattr(st, "acceptance_rate")
    assert GenerationStats().accepted_per_drafted == 0.0


def test_prompt_longer_than_context_raises():
    target = tiny_lm(0, max_pos=16)
    with pytest.raises(ValueError, match="context"):
        speculative_generate(target, None, list(range(16)) + [1], GenerationConfig(max_new_tokens=1))
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative_generate(target, None, [1, 2, 3], GenerationConfig(max_new_tokens=14))
    # exactly fitting is fine, and drafting never runs past the context
    res = speculative_generate(target, ModelDrafter(tiny_lm(1, max_pos=16)), [1, 2, 3],
                               GenerationConfig(max_new_tokens=13, gamma=8))
    assert len(res.tokens) == 13


def test_vocabulary_mismatch_raises():
    target = tiny_lm(0, vocab=16)
    drafter = ModelDrafter(tiny_lm(1, vocab=12))
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        speculative_generate(target, drafter, PROMPT, GenerationConfig(max_new_tokens=4))


def test_bad_config_and_prompt_raise(tiny_target):
    with pytest.raises(ValueError, match="gamma"):
        GenerationConfig(gamma=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        GenerationConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(tiny_target, None, [], GenerationConfig())
    with pytest.raises(ValueError, match="outside"):
        speculative_generate(tiny_target, None, [99], GenerationConfig())


def test_multi_draft_verifier_rejected_for_single_draft_engine(tiny_target, tiny_draft):
    bad = [n for n in ("kseq", "rrs", "greedy") if n in __import__("specot").available_verifiers()]
    for name in bad:
        v = get_verifier(name)
        try:
            v.check_construction("iid", 1)
        except ValueError:
            with pytest.raises(ValueError):
                speculative_generate(tiny_target, ModelDrafter(tiny_draft), PROMPT, GenerationConfig(), verifier=v)


@pytest.mark.parametrize("drafter_kind", ["ngram chain", "suffix tree"])
@pytest.mark.parametrize("temperature", [0.8, 1.0])
def test_deterministic_drafts_sample_what_autoregressive_decoding_samples(drafter_kind, temperature):
    """On the CPU a deterministic draft is verified by one draw from p per VISITED node, each taking
    the generator's next uniform as an autoregressive step does: with one seed the speculative
    output IS the autoregressive one, token for token (a coupling, stronger than equality in law).
    Float64 tiny target: a multi-token pass and a one-token pass agree to ~1e-15, far finer than
    the chance that a uniform falls between their CDFs. Drawing every node's row at once (the
    batched path) would consume extra uniforms and break the equality after the first draft."""
    target = tiny_lm(0)
    accepted = 0
    for seed in range(4):
        cfg = GenerationConfig(max_new_tokens=40, gamma=3, sampling=SamplingConfig(temperature), seed=seed,
                               stop_at_eos=False)
        ar = autoregressive_generate(target, PROMPT, cfg)
        if drafter_kind == "ngram chain":
            sd = speculative_generate(target, NGramDrafter(n=2), PROMPT, cfg)
        else:
            sd = tree_generate(target, SuffixDrafter(vocab_size=16), PROMPT, TreeSpec.sequences(2, 3, "greedy"), cfg,
                               verifier="greedy")
        assert sd.tokens == ar.tokens, f"seed {seed}"
        accepted += sd.stats.accepted
    assert accepted >= 10  # the walks went past the root: the equality covers accepted drafts
