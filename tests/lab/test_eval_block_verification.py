"""benchmarks/eval_block_verification.py: the Rao–Blackwellised per-pass expectations and the recording
verifier wrappers (which must not change what the engine decodes)."""

from __future__ import annotations

import pytest
import torch

from model_helpers import load_script, tiny_lm


@pytest.fixture(scope="module")
def ebv():
    return load_script("eval_block_verification")


def _expected_tau(law: torch.Tensor) -> float:
    m = law.sum(-1)
    return float((m * torch.arange(m.shape[0], dtype=torch.float64)).sum())


def test_chain_expectations_match_the_exact_laws(ebv):
    from specot.verifiers.block import block_output_law, token_level_output_law

    g = torch.Generator().manual_seed(0)
    for gamma in (1, 3, 5):
        p = torch.softmax(torch.randn(gamma + 1, 7, generator=g, dtype=torch.float64) * 2, -1)
        q = torch.softmax(torch.randn(gamma + 1, 7, generator=g, dtype=torch.float64) * 2, -1)
        x = torch.stack([torch.multinomial(q[i], 1, generator=g)[0] for i in range(gamma)])
        assert ebv._token_level_expected(p[:-1], q[:-1], x) == pytest.approx(_expected_tau(token_level_output_law(p, q, x)))
        assert ebv._block_expected(p, q, x) == pytest.approx(_expected_tau(block_output_law(p, q, x)))
        assert ebv._block_expected(p[:-1], q[:-1], x) == pytest.approx(ebv._block_expected(p, q, x))  # last row unused


def test_kseq_tree_expectation(ebv):
    from specot.verifiers import get_verifier

    g = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(4, 6, generator=g, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(4, 6, generator=g, dtype=torch.float64) * 2, -1)
    # a depth-one tree: two i.i.d. draws of the root, one repeated token → E[depth] = P(accept)
    d = [2, 2, 4]
    tokens, parents = [0, 2, 4], [-1, 0, 0]
    want = float(get_verifier("kseq").accept_probability(p[:1], q[:1], torch.tensor([d]))[0])
    assert ebv._kseq_tree_expected(p, q, tokens, parents, {0: d}) == pytest.approx(want)
    # a chain (one draw per node): k-Seq with n = 1 is speculative sampling
    tokens, parents = [0, 1, 3, 5], [-1, 0, 1, 2]
    x = torch.tensor(tokens[1:])
    assert ebv._kseq_tree_expected(p, q, tokens, parents, {0: [1], 1: [3], 2: [5]}) == pytest.approx(
        ebv._token_level_expected(p[:-1], q[:-1], x))


def test_recording_wrappers_do_not_change_decoding(ebv):
    from specot.drafting import ModelDrafter
    from specot.engine import GenerationConfig, speculative_generate
    from specot.sampling import SamplingConfig
    from specot.verifiers import get_verifier

    tgt, draft = tiny_lm(0, vocab=16), ModelDrafter(tiny_lm(1, vocab=16))
    cfg = GenerationConfig(max_new_tokens=12, gamma=3, seed=5, sampling=SamplingConfig(1.0))
    for name, wrap in (("speculative", ebv.RecordingTokenVerifier), ("block", ebv.RecordingSequenceVerifier)):
        plain = speculative_generate(tgt, draft, [1, 2, 3], cfg, verifier=get_verifier(name))
        rec = ebv.Recorder()
        wrapped = speculative_generate(tgt, draft, [1, 2, 3], cfg, verifier=wrap(get_verifier(name), rec))
        assert wrapped.tokens == plain.tokens
        # one paired expectation per pass that verified drafts (an empty draft is a plain target step)
        assert len(rec.pairs) == sum(1 for n in wrapped.stats.tree_sizes if n > 0)
        assert all(0.0 <= a <= 3.0 and 0.0 <= b <= 3.0 for a, b in rec.pairs)
