"""Block verification (Sun et al., ICLR 2025, Algorithm 2): exactness by enumeration, optimality
against token-level speculative sampling, and seeded sampling tests of ``verify_tree``.

The enumeration machinery here (prefix-keyed target/draft tables, draft-tree enumeration, committed-
sequence laws) is shared with ``test_verifiers_traversal.py``.

False-failure rate of the sampling tests: every chi-square test is seeded (deterministic); with a
p-value threshold of 1e-4 over the k = 5 chi-square tests in this file, a correct implementation
would fail on a fresh seed with probability at most 5e-4.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import scipy.stats
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specot.verifiers import (
    BlockVerifier,
    DraftLaw,
    SequenceVerifier,
    SpeculativeVerifier,
    block_expected_accepted,
    block_output_law,
    block_weights,
    get_verifier,
)
from specot.verifiers.block import token_level_output_law

TOL = 1e-10
KINDS = ["dirichlet", "sparse", "equal", "disjoint", "onehot_p", "onehot_q", "close"]


# ------------------------------------------------------------------------- enumeration machinery
class Tables:
    """A target model P(· | prefix) and a draft model Q(· | prefix) defined for EVERY prefix over a
    vocabulary of size V, drawn lazily (deterministically per prefix) from a seeded RNG.

    Kinds: ``dirichlet`` (dense random), ``sparse`` (random zeros in both), ``equal`` (Q = P),
    ``disjoint`` (P on the low half, Q on the high half), ``onehot_p`` / ``onehot_q`` (one model is
    deterministic), ``close`` (Q a small perturbation of P).
    """

    def __init__(self, V: int, seed: int, kind: str = "dirichlet"):
        self.V, self.seed, self.kind = V, seed, kind
        self._cache: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    def _pair(self, prefix: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        if prefix not in self._cache:
            V = self.V
            rng = np.random.default_rng([self.seed, len(prefix), *prefix])
            p = rng.dirichlet(np.full(V, 0.7))
            q = rng.dirichlet(np.full(V, 0.7))
            k = self.kind
            if k == "sparse":
                p = p * (rng.random(V) < 0.6)
                q = q * (rng.random(V) < 0.6)
                p[rng.integers(V)] += 0.1
                q[rng.integers(V)] += 0.1
            elif k == "equal":
                q = p.copy()
            elif k == "disjoint":
                h = V // 2
                p[h:] = 0.0
                q[:h] = 0.0
            elif k == "onehot_p":
                p = np.eye(V)[rng.integers(V)]
            elif k == "onehot_q":
                q = np.eye(V)[rng.integers(V)]
            elif k == "close":
                q = 0.85 * p + 0.15 * q
            self._cache[prefix] = (p / p.sum(), q / q.sum())
        return self._cache[prefix]

    def p(self, prefix) -> np.ndarray:
        return self._pair(tuple(prefix))[0]

    def q(self, prefix) -> np.ndarray:
        return self._pair(tuple(prefix))[1]


def target_joint(tables: Tables, L: int) -> dict[tuple[int, ...], float]:
    """The target model's joint law of the first L tokens."""
    out = {(): 1.0}
    for _ in range(L):
        nxt = {}
        for s, m in out.items():
            ps = tables.p(s)
            for y in range(tables.V):
                if ps[y] > 0:
                    nxt[s + (y,)] = m * ps[y]
        out = nxt
    return out


def extend_to(committed: dict[tuple[int, ...], float], tables: Tables, L: int) -> dict[tuple[int, ...], float]:
    """Extend every committed sequence with target-model samples to length L (exactly)."""
    out: dict[tuple[int, ...], float] = {}
    todo = list(committed.items())
    while todo:
        s, m = todo.pop()
        if m == 0:
            continue
        if len(s) >= L:
            out[s[:L]] = out.get(s[:L], 0.0) + m
            continue
        ps = tables.p(s)
        todo.extend((s + (y,), m * ps[y]) for y in range(tables.V) if ps[y] > 0)
    return out


def max_gap(a: dict, b: dict) -> float:
    keys = set(a) | set(b)
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in keys)


def node_prefixes(tokens: list[int], parents: list[int]) -> list[tuple[int, ...]]:
    """The prefix (tokens after the root, root-to-node path) of every node."""
    pre: list[tuple[int, ...]] = [()]
    for i in range(1, len(parents)):
        pre.append(pre[parents[i]] + (tokens[i],))
    return pre


def enumerate_trees(tables: Tables, parents: list[int], law: DraftLaw = DraftLaw.IID):
    """Every token assignment of a draft tree of shape ``parents`` with its probability: each node's
    children drawn from Q(· | node's prefix), i.i.d. (IID) or without replacement in index order (WOR).
    Yields ``(tokens [1 + N] list, prob)`` with the root token fixed to 0."""
    N = len(parents) - 1
    for assign in itertools.product(range(tables.V), repeat=N):
        toks = [0, *assign]
        pre = node_prefixes(toks, parents)
        prob, used = 1.0, {}
        for i in range(1, N + 1):
            qv = tables.q(pre[parents[i]])
            if law == DraftLaw.IID:
                prob *= qv[toks[i]]
            else:
                taken = used.setdefault(parents[i], [])
                if toks[i] in taken:
                    prob = 0.0
                    break
                left = qv.sum() - qv[taken].sum()
                prob *= qv[toks[i]] / left if left > 0 else 0.0
                taken.append(toks[i])
            if prob == 0.0:
                break
        if prob > 0:
            yield toks, prob


def tree_rows(tables: Tables, toks: list[int], parents: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``p, q [1 + N, V]`` float64 rows at every node of a tree."""
    pre = node_prefixes(toks, parents)
    p = torch.tensor(np.stack([tables.p(s) for s in pre]), dtype=torch.float64)
    q = torch.tensor(np.stack([tables.q(s) for s in pre]), dtype=torch.float64)
    return p, q


def committed_from_law(law: torch.Tensor, toks: list[int], parents: list[int], weight: float,
                       into: dict[tuple[int, ...], float]) -> None:
    """Add ``weight ×`` a verifier's tree output law ``[1 + N, V]`` (entry (v, y): path ends at v,
    extra token y) to a dict of committed sequences."""
    pre = node_prefixes(toks, parents)
    lw = law.numpy()
    for v, y in zip(*np.nonzero(lw)):
        s = pre[v] + (int(y),)
        into[s] = into.get(s, 0.0) + weight * float(lw[v, y])


def chain_parents(g: int) -> list[int]:
    return [-1, *range(g)]


def chain_committed_law(tables: Tables, g: int, law_fn) -> tuple[dict, float]:
    """Committed-sequence law and expected accepted drafts of a chain verifier ``law_fn(p, q, x)``."""
    committed: dict[tuple[int, ...], float] = {}
    parents = chain_parents(g)
    e_acc = 0.0
    for toks, prob in enumerate_trees(tables, parents):
        p, q = tree_rows(tables, toks, parents)
        law = law_fn(p, q, torch.tensor(toks[1:], dtype=torch.int64))
        assert torch.isfinite(law).all() and (law >= -1e-15).all()
        assert abs(float(law.sum()) - 1.0) < 1e-12
        committed_from_law(law, toks, parents, prob, committed)
        e_acc += prob * float((law.sum(-1) * torch.arange(g + 1, dtype=torch.float64)).sum())
    return committed, e_acc


CASES = [(V, g, kind, seed) for (V, g) in [(3, 1), (3, 2), (3, 3), (4, 2), (4, 3), (5, 2)]
         for kind in KINDS for seed in (0, 1)]


# ------------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize("V,g,kind,seed", CASES)
def test_block_is_lossless_and_beats_token_level(V, g, kind, seed):
    tables = Tables(V, seed, kind)
    L = g + 1
    want = target_joint(tables, L)
    blk, e_blk = chain_committed_law(tables, g, block_output_law)
    assert max_gap(extend_to(blk, tables, L), want) < TOL
    tok, e_tok = chain_committed_law(tables, g, token_level_output_law)
    assert max_gap(extend_to(tok, tables, L), want) < TOL  # the reference is itself exact
    assert e_blk >= e_tok - 1e-12
    if g == 1:
        assert abs(e_blk - e_tok) < 1e-12  # one draft: block verification is speculative sampling
    if kind == "equal":
        assert abs(e_blk - g) < 1e-12
    if kind == "disjoint":
        assert e_blk == 0.0


def test_paper_toy_example():
    """Sun et al. 2025, Sec. 1: p = (1/3, 2/3), q = (2/3, 1/3), γ = 2, context-free: token-level
    verification accepts 10/9 drafts in expectation, block verification 11/9."""
    p1 = torch.tensor([1 / 3, 2 / 3], dtype=torch.float64)
    q1 = torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    e_b = e_t = 0.0
    for xs in itertools.product([0, 1], repeat=2):
        pr = float(q1[xs[0]] * q1[xs[1]])
        P, Q, x = p1.expand(3, 2), q1.expand(3, 2), torch.tensor(xs)
        e_b += pr * float(block_expected_accepted(P, Q, x))
        e_t += pr * float((token_level_output_law(P, Q, x).sum(-1) * torch.arange(3.0, dtype=torch.float64)).sum())
    assert abs(e_b - 11 / 9) < 1e-12
    assert abs(e_t - 10 / 9) < 1e-12


def _wrong_naive_h(p, q, x):
    """Negative control: stop at i with probability w_i (no residual correction of h)."""
    w, _, res = block_weights(p, q, x)
    h = w.clone()
    h[0] = 1.0
    tail = torch.flip(torch.cumprod(torch.flip(1.0 - h, [0]), 0), [0])
    stop = h * torch.cat([tail[1:], torch.ones(1, dtype=torch.float64)])
    return stop[:, None] * res / res.sum(-1, keepdim=True)


def _wrong_plain_residual(p, q, x):
    """Negative control: block stopping rule but the token-level residual norm((p_i − q_i)_+)."""
    law = block_output_law(p, q, x)
    g = x.shape[0]
    res = (p - q).clamp_min(0.0)
    res[g] = p[g]
    res = torch.where(res.sum(-1, keepdim=True) > 0, res, p)
    return law.sum(-1, keepdim=True) * res / res.sum(-1, keepdim=True)


@pytest.mark.parametrize("wrong", [_wrong_naive_h, _wrong_plain_residual])
def test_negative_controls_are_caught(wrong):
    tables = Tables(3, 0, "dirichlet")
    want = target_joint(tables, 3)
    got, _ = chain_committed_law(tables, 2, wrong)
    assert max_gap(extend_to(got, tables, 3), want) > 1e-3


def test_gamma_one_equals_speculative_sampling():
    gen = torch.Generator().manual_seed(3)
    spec = SpeculativeVerifier()
    for _ in range(20):
        p = torch.distributions.Dirichlet(torch.ones(6, dtype=torch.float64)).sample((2,))
        q = torch.distributions.Dirichlet(torch.ones(6, dtype=torch.float64)).sample((2,))
        x = torch.multinomial(q[0], 1, generator=gen)
        law = block_output_law(p, q, x)  # [2, V]
        pi = spec.output_distribution(p[:1], q[:1], x.view(1, 1))[0]
        a = float(spec.accept_probability(p[:1], q[:1], x.view(1, 1))[0])
        assert abs(float(law[1].sum()) - a) < 1e-12
        emitted = law[0].clone()
        emitted[x] += law[1].sum()
        assert torch.allclose(emitted, pi, atol=1e-12)
        assert torch.allclose(law[1] / law[1].sum(), p[1], atol=1e-12)  # bonus token from p_1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 4), g=st.integers(1, 3),
       kind=st.sampled_from(KINDS))
def test_property_lossless_and_dominates(seed, V, g, kind):
    if V**(g + 1) > 256:
        g = 2
    tables = Tables(V, seed, kind)
    blk, e_blk = chain_committed_law(tables, g, block_output_law)
    assert max_gap(extend_to(blk, tables, g + 1), target_joint(tables, g + 1)) < TOL
    _, e_tok = chain_committed_law(tables, g, token_level_output_law)
    assert e_blk >= e_tok - 1e-12


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), g=st.integers(0, 5))
def test_property_weights(seed, g):
    """w, h in [0, 1], w_0 = h_0 = 1, and the output law is a distribution."""
    gen = torch.Generator().manual_seed(seed)
    V = 7
    p = torch.distributions.Dirichlet(torch.full((V,), 0.5, dtype=torch.float64)).sample((g + 1,))
    q = torch.distributions.Dirichlet(torch.full((V,), 0.5, dtype=torch.float64)).sample((g + 1,))
    q = (q + 1e-3) / (q + 1e-3).sum(-1, keepdim=True)
    x = torch.stack([torch.multinomial(q[i], 1, generator=gen)[0] for i in range(g)]) if g else \
        torch.zeros(0, dtype=torch.int64)
    w, h, res = block_weights(p, q, x)
    assert w[0] == 1 and h[0] == 1 and ((w >= 0) & (w <= 1)).all() and ((h >= 0) & (h <= 1)).all()
    law = block_output_law(p, q, x)
    assert abs(float(law.sum()) - 1) < 1e-12 and (law >= 0).all()


# ------------------------------------------------------------------------------ verify_tree sampling
def _cells(law: torch.Tensor) -> dict[tuple[int, int], float]:
    lw = law.numpy()
    return {(int(i), int(y)): float(lw[i, y]) for i, y in zip(*np.nonzero(lw > 0))}


def _chi2(counts: Counter, probs: dict, n: int) -> float:
    assert set(counts) <= set(probs), "an outcome of probability zero was observed"
    keys = sorted(probs)
    exp = np.array([probs[k] * n for k in keys])
    obs = np.array([counts.get(k, 0) for k in keys], float)
    small = exp < 5
    if small.any():
        exp = np.append(exp[~small], exp[small].sum())
        obs = np.append(obs[~small], obs[small].sum())
    if len(exp) < 2:
        return 1.0
    return float(scipy.stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


@pytest.mark.parametrize("kind,seed", [("dirichlet", 0), ("sparse", 1), ("close", 2)])
def test_verify_tree_matches_enumerated_law(kind, seed):
    tables = Tables(4, seed, kind)
    g = 3
    gen = torch.Generator().manual_seed(100 + seed)
    trees = list(enumerate_trees(tables, chain_parents(g)))
    toks, _ = max(trees, key=lambda t: t[1])  # the most likely draft chain
    p, q = tree_rows(tables, toks, chain_parents(g))
    law = block_output_law(p, q, torch.tensor(toks[1:]))
    v = BlockVerifier()
    n = 6000
    counts: Counter = Counter()
    tk, par = torch.tensor(toks), torch.tensor(chain_parents(g))
    for _ in range(n):
        out = v.verify_tree(p, q, tk, par, gen)
        t = len(out.path)
        assert out.path == tuple(range(1, t + 1)) and list(out.tokens[:t]) == toks[1 : t + 1]
        counts[(t, out.tokens[-1])] += 1
    assert _chi2(counts, _cells(law), n) > 1e-4


def test_end_to_end_sampling_matches_target():
    """Draft chains sampled from the draft model, verified by verify_tree, completed by the target
    model: the first γ + 1 tokens follow the target model's joint law (chi-square)."""
    tables = Tables(3, 7, "dirichlet")
    g, L, n = 2, 3, 6000
    rng = np.random.default_rng(5)
    gen = torch.Generator().manual_seed(5)
    v = get_verifier("block")
    counts: Counter = Counter()
    par = torch.tensor(chain_parents(g))
    for _ in range(n):
        toks = [0]
        for i in range(g):
            toks.append(int(rng.choice(3, p=tables.q(toks[1:]))))
        p, q = tree_rows(tables, toks, chain_parents(g))
        out = v.verify_tree(p, q, torch.tensor(toks), par, gen)
        s = tuple(out.tokens)
        while len(s) < L:
            s += (int(rng.choice(3, p=tables.p(s))),)
        counts[s[:L]] += 1
    assert _chi2(counts, target_joint(tables, L), n) > 1e-4


def test_degenerate_cases_are_deterministic():
    gen = torch.Generator().manual_seed(0)
    v = BlockVerifier()
    V, g = 5, 4
    p = torch.distributions.Dirichlet(torch.ones(V, dtype=torch.float64)).sample((g + 1,))
    toks = torch.tensor([0, 1, 2, 3, 4])
    par = torch.tensor(chain_parents(g))
    for _ in range(50):  # p = q: every draft is accepted
        out = v.verify_tree(p, p.clone(), toks, par, gen)
        assert out.path == (1, 2, 3, 4) and out.tokens[:4] == (1, 2, 3, 4)
    q = torch.zeros(g + 1, V, dtype=torch.float64)
    q[:, 4] = 1.0
    pd = torch.zeros(g + 1, V, dtype=torch.float64)
    pd[:, :2] = 0.5
    for _ in range(50):  # disjoint supports: nothing accepted, the correction comes from p_0
        out = v.verify_tree(pd, q, torch.tensor([0, 4, 4, 4, 4]), par, gen)
        assert out.path == () and out.tokens[0] in (0, 1)


def test_reproducible_and_same_uniform_stream():
    tables = Tables(4, 3, "dirichlet")
    toks = [0, 1, 2, 3]
    p, q = tree_rows(tables, toks, chain_parents(3))
    v = BlockVerifier()
    a = [v.verify_tree(p, q, torch.tensor(toks), torch.tensor(chain_parents(3)), torch.Generator().manual_seed(s))
         for s in range(20)]
    b = [v.verify_tree(p, q, torch.tensor(toks), torch.tensor(chain_parents(3)), torch.Generator().manual_seed(s))
         for s in range(20)]
    assert a == b
    gen = torch.Generator().manual_seed(9)
    v.verify_tree(p, q, torch.tensor(toks), torch.tensor(chain_parents(3)), gen)
    ref = torch.Generator().manual_seed(9)
    torch.rand(4, generator=ref, dtype=torch.float64)  # γ + 1 uniforms consumed
    assert torch.equal(torch.rand(3, generator=gen, dtype=torch.float64),
                       torch.rand(3, generator=ref, dtype=torch.float64))


def test_large_vocabulary_float32():
    V, g = 49152, 5
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(g + 1, V, generator=gen) * 3
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits + torch.randn(g + 1, V, generator=gen), -1)
    x = torch.stack([torch.multinomial(q[i], 1, generator=gen)[0] for i in range(g)])
    toks = torch.cat([torch.tensor([7]), x])
    out = BlockVerifier().verify_tree(p, q, toks, torch.tensor(chain_parents(g)), gen)
    t = len(out.path)
    assert 0 <= t <= g and len(out.tokens) == t + 1 and 0 <= out.tokens[-1] < V
    law = block_output_law(p, q, x)
    assert abs(float(law.sum()) - 1) < 1e-9


# ------------------------------------------------------------------------------------ interface
def test_registry_and_construction():
    v = get_verifier("block")
    assert isinstance(v, SequenceVerifier) and v.chains_only and DraftLaw.IID in v.valid_laws
    v.check_construction("iid", 1)
    with pytest.raises(ValueError, match="chain"):
        v.check_construction("iid", 2)


def test_input_errors():
    v = BlockVerifier()
    p = torch.tensor([[0.5, 0.5, 0.0]] * 3, dtype=torch.float64)
    q = torch.tensor([[0.2, 0.3, 0.5]] * 3, dtype=torch.float64)
    par = torch.tensor([-1, 0, 1])
    with pytest.raises(ValueError, match="chain"):
        v.verify_tree(p, q, torch.tensor([0, 1, 1]), torch.tensor([-1, 0, 0]))
    with pytest.raises(ValueError, match="q\\(x\\) = 0"):
        q0 = q.clone()
        q0[1] = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
        v.verify_tree(p, q0, torch.tensor([0, 1, 2]), par)
    with pytest.raises(ValueError, match="outside"):
        v.verify_tree(p, q, torch.tensor([0, 1, 3]), par)
    with pytest.raises(ValueError, match="p \\(target"):
        v.verify_tree(p * 2, q, torch.tensor([0, 1, 1]), par)
    with pytest.raises(ValueError, match="q \\(draft"):
        v.verify_tree(p, -q, torch.tensor([0, 1, 1]), par)
    with pytest.raises(ValueError, match="shape"):
        v.verify_tree(p, q[:2], torch.tensor([0, 1, 1]), par)
    with pytest.raises(TypeError):
        v.verify_tree(p, q, torch.tensor([0.0, 1.0, 1.0]), par)
    q_leaf_garbage = q.clone()
    q_leaf_garbage[2] = 0.0  # the leaf's q row is unused
    v.verify_tree(p, q_leaf_garbage, torch.tensor([0, 1, 1]), par)


def test_one_host_sync(host_conversions):
    """verify_tree converts device values to host values exactly once (one ``.tolist()``)."""
    calls = host_conversions
    tables = Tables(4, 3, "dirichlet")
    toks = [0, 1, 2, 3]
    p, q = tree_rows(tables, toks, chain_parents(3))
    tk, par = torch.tensor(toks), torch.tensor(chain_parents(3))
    gen = torch.Generator().manual_seed(0)
    calls.clear()
    BlockVerifier().verify_tree(p, q, tk, par, gen)
    assert calls == ["tolist"]


def test_trusted_inputs_skip_value_checks_only():
    from specot._validation import trusted_inputs

    v = BlockVerifier()
    p = torch.tensor([[0.5, 0.5, 0.0]] * 3, dtype=torch.float64)
    q = torch.tensor([[0.2, 0.3, 0.5]] * 3, dtype=torch.float64)
    par = torch.tensor([-1, 0, 1])
    with trusted_inputs():
        v.verify_tree(p, q * 1.5, torch.tensor([0, 1, 1]), par)  # values are the caller's promise
        with pytest.raises(ValueError, match="chain"):
            v.verify_tree(p, q, torch.tensor([0, 1, 1]), torch.tensor([-1, 0, 0]))
    with pytest.raises(TypeError):
        v.verify_tree(p, q, torch.tensor([0, 1, 1]), par, generator=3)


def test_drafts_keyword_checks_a_chain():
    tables = Tables(3, 2, "dirichlet")
    toks = [0, 1, 2]
    p, q = tree_rows(tables, toks, chain_parents(2))
    v = BlockVerifier()
    out = v.verify_tree(p, q, torch.tensor(toks), torch.tensor(chain_parents(2)), torch.Generator().manual_seed(1),
                        drafts={0: [1], 1: [2]})
    assert len(out.tokens) == len(out.path) + 1
    with pytest.raises(ValueError, match="one draw"):
        v.verify_tree(p, q, torch.tensor(toks), torch.tensor(chain_parents(2)), drafts={0: [1, 1], 1: [2]})
