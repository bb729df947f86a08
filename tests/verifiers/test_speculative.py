"""Single-draft speculative sampling and lenience: exact enumeration, sampling, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sstats

from specot.verifiers import LenientVerifier, SpeculativeVerifier, get_verifier


def emitted_distribution(verifier, p, q):
    """Σ_x q(x) π(y | x): the exact law of the emitted token, [B, V]."""
    B, V = p.shape
    out = torch.zeros_like(p)
    for x in range(V):
        if (q[:, x] > 0).all():
            drafts = torch.full((B, 1), x)
            out += q[:, x:x + 1] * verifier.output_distribution(p, q, drafts)
    return out


def rand_dist(g, B, V, zeros=0.3):
    d = torch.rand(B, V, generator=g, dtype=torch.float64) ** 3
    d = d * (torch.rand(B, V, generator=g, dtype=torch.float64) > zeros)
    d[:, 0] += 1e-3
    return d / d.sum(-1, keepdim=True)


def test_exact_enumeration_lossless_many_random_cases():
    g = torch.Generator().manual_seed(0)
    v = SpeculativeVerifier()
    for V in range(2, 7):
        p, q = rand_dist(g, 200, V), rand_dist(g, 200, V, zeros=0.0)  # q full support: every x drafted
        torch.testing.assert_close(emitted_distribution(v, p, q), p, atol=1e-10, rtol=0)
        # acceptance by enumeration: Σ_x q(x)·min(1, p(x)/q(x)) = Σ min(p, q)
        accept = sum(q[:, x] * v.accept_probability(p, q, torch.full((200, 1), x)) for x in range(V))
        torch.testing.assert_close(v.acceptance(p, q).value, accept, atol=1e-10, rtol=0)
        torch.testing.assert_close(accept, torch.minimum(p, q).sum(-1), atol=1e-12, rtol=0)


def test_exact_enumeration_with_draft_zeros():
    # q(x) = 0 where p(x) > 0: undrafted tokens must come from the residual
    p = torch.tensor([[0.2, 0.3, 0.5, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.6, 0.0, 0.4]], dtype=torch.float64)
    torch.testing.assert_close(emitted_distribution(SpeculativeVerifier(), p, q), p, atol=1e-12, rtol=0)


@pytest.mark.parametrize("lenience", [0.1, 0.3, 0.5, 0.9, 1.0])
def test_lenience_bound_by_enumeration(lenience):
    g = torch.Generator().manual_seed(1)
    v = LenientVerifier(lenience)
    p, q = rand_dist(g, 300, 5), rand_dist(g, 300, 5, zeros=0.0)
    emitted = emitted_distribution(v, p, q)
    assert (emitted <= p / lenience + 1e-12).all()
    torch.testing.assert_close(emitted.sum(-1), torch.ones(300, dtype=torch.float64), atol=1e-12, rtol=0)
    acc = v.acceptance(p, q).value
    torch.testing.assert_close(acc, torch.minimum(p / lenience, q).sum(-1), atol=1e-12, rtol=0)
    assert (acc >= SpeculativeVerifier().acceptance(p, q).value - 1e-12).all()


def test_one_hot_draft_is_deterministic_proposal():
    p = torch.tensor([[0.1, 0.6, 0.3]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    pi = SpeculativeVerifier().output_distribution(p, q, torch.tensor([[2]]))
    torch.testing.assert_close(pi, p, atol=1e-15, rtol=0)  # accept w.p. p(x); else residual ∝ p off x


def test_sampling_agrees_with_conditional_law_chi_square():
    # false-failure rate 1e-4 per test (fixed seed: deterministic)
    p = torch.tensor([0.1, 0.4, 0.2, 0.3], dtype=torch.float64)
    q = torch.tensor([0.5, 0.1, 0.3, 0.1], dtype=torch.float64)
    v = SpeculativeVerifier()
    g = torch.Generator().manual_seed(5)
    N = 40000
    x = torch.tensor([0] * N).unsqueeze(-1)
    out = v.verify(p.expand(N, 4), q.expand(N, 4), x, g)
    pi = v.output_distribution(p[None], q[None], torch.tensor([[0]]))[0].numpy()
    counts = np.bincount(out.tokens.numpy(), minlength=4)
    keep = pi > 0
    assert counts[~keep].sum() == 0
    assert sstats.chisquare(counts[keep], pi[keep] * N).pvalue > 1e-4
    # the accepted flag is exactly "emitted the draft and was accepted": P(accept) = min(1, p/q)
    assert out.accepted.double().mean().item() == pytest.approx(0.2, abs=4.5 * (0.2 * 0.8 / N) ** 0.5)
    assert ((out.accepted_index == 0) | (out.accepted_index == -1)).all()


def test_p_equals_q_accepts_everything_and_no_nan():
    p = torch.softmax(torch.randn(50, 30, dtype=torch.float64), -1)
    drafts = torch.multinomial(p, 1)
    out = SpeculativeVerifier().verify(p, p, drafts, torch.Generator().manual_seed(0))
    assert out.accepted.all() and torch.equal(out.tokens, drafts[:, 0])
    pi = SpeculativeVerifier().output_distribution(p, p, drafts)
    assert torch.isfinite(pi).all()


def test_disjoint_supports_always_reject():
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    q = torch.tensor([[0.0, 0.0, 0.5, 0.5]])
    out = SpeculativeVerifier().verify(p.expand(100, 4), q.expand(100, 4), torch.full((100, 1), 2),
                                       torch.Generator().manual_seed(0))
    assert not out.accepted.any() and (out.tokens < 2).all()
    assert SpeculativeVerifier().acceptance(p, q).value.item() == 0.0


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 6), st.integers(0, 10_000), st.sampled_from(["onehot_p", "onehot_q", "equal", "random"]),
       st.sampled_from([torch.float32, torch.float64]))
def test_hypothesis_degenerate_inputs_exact(V, seed, kind, dtype):
    g = torch.Generator().manual_seed(seed)
    p, q = rand_dist(g, 1, V), rand_dist(g, 1, V, zeros=0.0)
    if kind == "onehot_p":
        p = torch.zeros(1, V, dtype=torch.float64)
        p[0, seed % V] = 1
    elif kind == "onehot_q":
        q = torch.zeros(1, V, dtype=torch.float64)
        q[0, seed % V] = 1
    elif kind == "equal":
        q = p.clone()
    v = SpeculativeVerifier()
    out = torch.zeros(1, V, dtype=torch.float64)
    for x in range(V):
        if q[0, x] > 0:
            pi = v.output_distribution(p.to(dtype), q.to(dtype), torch.tensor([[x]]))
            assert torch.isfinite(pi).all()
            out += q[:, x:x + 1] * pi.double()
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(out, p, atol=tol, rtol=0)
    tok = v.verify(p.to(dtype), q.to(dtype), torch.multinomial(q, 1), torch.Generator().manual_seed(seed))
    assert p[0, tok.tokens[0]] > 0


@pytest.mark.parametrize(
    "p,q,drafts,err,match",
    [
        (torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.6]]), torch.tensor([[0]]), ValueError, "sum to 1"),
        (torch.tensor([[0.5, float("nan")]]), torch.tensor([[0.5, 0.5]]), torch.tensor([[0]]), ValueError, "NaN"),
        (torch.tensor([[1.5, -0.5]]), torch.tensor([[0.5, 0.5]]), torch.tensor([[0]]), ValueError, "negative"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([[0.3, 0.3, 0.4]]), torch.tensor([[0]]), ValueError, "vocabulary mismatch"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]]), torch.tensor([[2]]), ValueError, "outside"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[1]]), ValueError, "q\\(x\\) = 0"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]]), torch.tensor([[0, 1]]), ValueError, "one draft"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]]), torch.tensor([[0.0]]), TypeError, "integer"),
        ([[0.5, 0.5]], torch.tensor([[0.5, 0.5]]), torch.tensor([[0]]), TypeError, "torch.Tensor"),
        (torch.tensor([0.5, 0.5]), torch.tensor([0.5, 0.5]), torch.tensor([[0]]), ValueError, "dimensions"),
        (torch.tensor([[0.5, 0.5]]), torch.tensor([[0.5, 0.5]]), torch.tensor([[0], [1]]), ValueError, "batch"),
    ],
)
def test_bad_inputs_raise(p, q, drafts, err, match):
    with pytest.raises(err, match=match):
        SpeculativeVerifier().verify(p, q, drafts)


def test_bad_lenience_and_unknown_verifier():
    for bad in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(ValueError, match="lenience"):
            LenientVerifier(bad)
    with pytest.raises(ValueError, match="unknown verifier"):
        get_verifier("does-not-exist")
    with pytest.raises(ValueError, match="single draft"):
        SpeculativeVerifier().acceptance(torch.tensor([[1.0]]), torch.tensor([[1.0]]), n=2)
    with pytest.raises(ValueError, match="drafts per position"):
        SpeculativeVerifier().check_construction("iid", 2)
    SpeculativeVerifier().check_construction("greedy", 1)  # one greedy draft is one draw from q
    with pytest.raises(ValueError):
        SpeculativeVerifier().check_construction("no-such-law", 1)
