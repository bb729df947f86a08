"""verify() samples exactly from output_distribution() (seeded chi-square tests).

Every test uses a fixed seed, so it is deterministic; the stated significance level is the
false-failure rate the test would have under fresh randomness: chi-square at alpha = 1e-4 per test
(cells with expected count < 5 pooled), binomial z-tests at |z| <= 4.5 (two-sided rate ~7e-6).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specot.laws import enumerate_draft_law, sample_drafts
from specot.verifiers import DraftLaw, get_verifier
from verifier_helpers import LOSSLESS, chi_square_pvalue

ALPHA = 1e-4
N = 20_000

SAMPLED = LOSSLESS + [("mentored", DraftLaw.IID, {"D": 0.05}, (1,)), ("lenient", DraftLaw.IID, {"lenience": 0.6}, (1,))]
CASES = [(name, law, params, ns[-1]) for name, law, params, ns in SAMPLED]
IDS = [f"{c[0]}-{c[1].value}-n{c[3]}" for c in CASES]


def _pq(seed: int, V: int = 6):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(2 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    return p, q


@pytest.mark.parametrize("name,law,params,n", CASES, ids=IDS)
def test_verify_matches_conditional_law(name, law, params, n):
    p, q = _pq(21 + n)
    v = get_verifier(name, **params)
    tuples, probs = enumerate_draft_law(q, n, law)
    picks = torch.argsort(probs, descending=True)[:3].tolist()  # three likely draft tuples
    gen = torch.Generator().manual_seed(1234)
    for k in picks:
        d = tuples[k].expand(N, -1).contiguous()
        pe, qe = p.expand(N, -1), q.expand(N, -1)
        out = v.verify(pe, qe, d, gen)
        pi = v.output_distribution(p[None], q[None], tuples[k : k + 1])[0].numpy()
        counts = np.bincount(out.tokens.numpy(), minlength=p.shape[0])
        assert chi_square_pvalue(counts, pi) > ALPHA, f"{name}: tokens do not follow π(y | {tuples[k].tolist()})"
        # accepted index points at a draft equal to the token; the acceptance frequency is right
        acc = out.accepted_index >= 0
        assert torch.equal(out.tokens[acc], d[acc, out.accepted_index[acc]])
        a = float(v.accept_probability(p[None], q[None], tuples[k : k + 1])[0])
        if 0 < a < 1:
            z = (float(acc.double().mean()) - a) / np.sqrt(a * (1 - a) / N)
            assert abs(z) < 4.5, f"{name}: acceptance frequency off (z = {z:.2f})"
        else:
            assert float(acc.double().mean()) == a


@pytest.mark.parametrize("name,law,params,n", [c for c in CASES if c[0] not in ("mentored", "lenient")],
                         ids=[i for c, i in zip(CASES, IDS) if c[0] not in ("mentored", "lenient")])
def test_end_to_end_emits_p(name, law, params, n):
    """Drafts from the sampler, then verify: the emitted tokens follow p."""
    p, q = _pq(77 + n)
    gen = torch.Generator().manual_seed(99)
    pe, qe = p.expand(N, -1).contiguous(), q.expand(N, -1).contiguous()
    d = sample_drafts(qe, n, law, gen)
    out = get_verifier(name, **params).verify(pe, qe, d, gen)
    counts = np.bincount(out.tokens.numpy(), minlength=p.shape[0])
    assert chi_square_pvalue(counts, p.numpy()) > ALPHA


@pytest.mark.parametrize("name", ["kseq", "rrs", "rrs_wor", "greedy", "spechub", "mentored"])
def test_predrawn_uniforms_are_deterministic(name):
    law = {"rrs_wor": DraftLaw.WOR, "greedy": DraftLaw.GREEDY, "spechub": DraftLaw.SPECHUB}.get(name, DraftLaw.IID)
    n = 1 if name == "mentored" else 2
    p, q = _pq(5)
    B = 64
    pe, qe = p.expand(B, -1), q.expand(B, -1)
    d = sample_drafts(qe.contiguous(), n, law, torch.Generator().manual_seed(0))
    v = get_verifier(name)
    k = 2 if name in ("greedy", "spechub", "mentored") else n + 1
    u = torch.rand(B, k, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a, b = v.verify(pe, qe, d, uniforms=u), v.verify(pe, qe, d, uniforms=u)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.accepted_index, b.accepted_index)
    with pytest.raises(ValueError, match="uniforms"):
        v.verify(pe, qe, d, uniforms=u[:, :1])
