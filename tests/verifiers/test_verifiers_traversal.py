"""Traversal verification (Weng et al., NeurIPS 2025, Algorithm 1): exactness on draft trees by
enumeration (i.i.d. and without-replacement siblings), reduction to block verification on chains and
to recursive rejection sampling on depth-one trees, comparison with token-level tree verification,
and seeded sampling tests of ``verify_tree``.

False-failure rate of the sampling tests: they are seeded (deterministic); with a p-value threshold
of 1e-4 over the k = 3 chi-square tests in this file a correct implementation fails on a fresh seed
with probability at most 3e-4.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_verifiers_block import (
    KINDS,
    Tables,
    _chi2,
    chain_parents,
    committed_from_law,
    enumerate_trees,
    extend_to,
    max_gap,
    node_prefixes,
    target_joint,
    tree_rows,
)

from specot.verifiers import (
    DraftLaw,
    RRSVerifier,
    RRSWORVerifier,
    SequenceVerifier,
    TraversalVerifier,
    TraversalWORVerifier,
    block_output_law,
    get_verifier,
    traversal_output_law,
    traversal_weights,
)
from specot.verifiers.traversal import expand_tree, tree_structure

TOL = 1e-10
SHAPES = [
    [-1, 0],  # one draft
    [-1, 0, 0],  # two siblings
    [-1, 0, 0, 0],  # three siblings
    [-1, 0, 1],  # chain
    [-1, 0, 0, 1],  # two children, the first with a child
    [-1, 0, 1, 0],  # same shape, other numbering
    [-1, 0, 1, 1],  # a chain whose second node has two children
    [-1, 0, 1, 0, 3],  # two chains of length two
]


def depth_of(parents: list[int]) -> int:
    d = [0]
    for i in range(1, len(parents)):
        d.append(d[parents[i]] + 1)
    return max(d)


def token_level_tree_law(p: torch.Tensor, q: torch.Tensor, toks: list[int], parents: list[int],
                         law: DraftLaw) -> torch.Tensor:
    """Exact output law ``[1 + N, V]`` of token-level tree verification (SpecInfer / SpecTr style:
    recursive rejection sampling among the children of each accepted node, top-down), the baseline."""
    children, _ = tree_structure(parents)
    out = torch.zeros_like(p)

    def rec(u: int, mass: float) -> None:
        P, Q = p[u].clone(), q[u].clone()
        for c in children[u]:
            x = toks[c]
            a = min(1.0, float(P[x]) / float(Q[x])) if Q[x] > 0 else 0.0
            if a > 0:
                rec(c, mass * a)
            mass *= 1.0 - a
            r = (P - Q).clamp_min(0.0)
            P = r / r.sum() if r.sum() > 0 else P
            if law == DraftLaw.WOR:
                Q[x] = 0.0
                Q = Q / Q.sum() if Q.sum() > 0 else Q
        out[u] += mass * P

    rec(0, 1.0)
    return out


def expected_accepted(law: torch.Tensor, parents: list[int]) -> float:
    d = [0]
    for i in range(1, len(parents)):
        d.append(d[parents[i]] + 1)
    return float((law.sum(-1) * torch.tensor(d, dtype=torch.float64)).sum())


def tree_committed(tables: Tables, parents: list[int], law: DraftLaw, fn) -> tuple[dict, float, float]:
    """Committed-sequence law, expected accepted drafts and total draft-law mass of a tree verifier."""
    committed: dict = {}
    e_acc = total = 0.0
    for toks, prob in enumerate_trees(tables, parents, law):
        p, q = tree_rows(tables, toks, parents)
        out = fn(p, q, toks, parents, law)
        assert torch.isfinite(out).all() and (out >= -1e-15).all() and abs(float(out.sum()) - 1) < 1e-12
        committed_from_law(out, toks, parents, prob, committed)
        e_acc += prob * expected_accepted(out, parents)
        total += prob
    return committed, e_acc, total


def _trav(p, q, toks, parents, law):
    return traversal_output_law(p, q, torch.tensor(toks), parents, law)


# without replacement, every node needs at least as many tokens with q > 0 as it has children: the
# kinds whose draft model has zeros (sparse, disjoint, onehot_q) are exercised with i.i.d. siblings
WOR_KINDS = ["dirichlet", "equal", "onehot_p", "close"]
CASES = [(par, law, kind, seed) for par in SHAPES for law in (DraftLaw.IID, DraftLaw.WOR)
         for kind in (KINDS if law == DraftLaw.IID else WOR_KINDS) for seed in (0, 1)]


@pytest.mark.parametrize("parents,law,kind,seed", CASES)
def test_traversal_is_lossless(parents, law, kind, seed):
    V = 3 if len(parents) >= 5 else 4
    tables = Tables(V, seed, kind)
    L = depth_of(parents) + 1
    got, e_trav, total = tree_committed(tables, parents, law, _trav)
    assert abs(total - 1.0) < 1e-12  # the enumeration covers the whole draft law
    want = target_joint(tables, L)
    assert max_gap(extend_to(got, tables, L), want) < TOL
    ref, e_tok, _ = tree_committed(tables, parents, law, token_level_tree_law)
    assert max_gap(extend_to(ref, tables, L), want) < TOL  # the baseline is exact too
    if depth_of(parents) == 1:
        assert abs(e_trav - e_tok) < 1e-12  # depth one: traversal verification is RRS
    if kind == "equal":
        assert abs(e_trav - depth_of(parents)) < 1e-12
    if kind == "disjoint":
        assert e_trav == 0.0


def _wrong_no_h_update(p, q, toks, parents, law):
    """Negative control: traversal that never lowers a parent's weight after a rejection (keeps w)."""
    import specot.verifiers.traversal as tr

    orig = tr._stop_probability
    tr._stop_probability = lambda S, w: w
    try:
        return traversal_output_law(p, q, torch.tensor(toks), parents, law)
    finally:
        tr._stop_probability = orig


def _wrong_law(p, q, toks, parents, law):
    """Negative control: the i.i.d. rule applied to siblings drawn without replacement."""
    return traversal_output_law(p, q, torch.tensor(toks), parents, DraftLaw.IID)


@pytest.mark.parametrize("wrong,law,parents,V", [
    (_wrong_no_h_update, DraftLaw.IID, [-1, 0, 1, 0, 3], 3),
    (_wrong_law, DraftLaw.WOR, [-1, 0, 0], 4),
])
def test_negative_controls_are_caught(wrong, law, parents, V):
    tables = Tables(V, 1, "dirichlet")
    L = depth_of(parents) + 1
    got, _, _ = tree_committed(tables, parents, law, wrong)
    assert max_gap(extend_to(got, tables, L), target_joint(tables, L)) > 1e-3


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), g=st.integers(0, 5), V=st.integers(2, 9))
def test_chain_equals_block_verification(seed, g, V):
    gen = torch.Generator().manual_seed(seed)
    p = torch.distributions.Dirichlet(torch.full((V,), 0.6, dtype=torch.float64)).sample((g + 1,))
    q = torch.distributions.Dirichlet(torch.full((V,), 0.6, dtype=torch.float64)).sample((g + 1,))
    q = (q + 1e-4) / (q + 1e-4).sum(-1, keepdim=True)
    x = [int(torch.multinomial(q[i], 1, generator=gen)) for i in range(g)]
    toks = torch.tensor([0, *x])
    a = traversal_output_law(p, q, toks, chain_parents(g))
    b = block_output_law(p, q, toks[1:])
    assert torch.allclose(a, b, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 4), wor=st.booleans())
def test_depth_one_equals_rrs(seed, n, wor):
    V = 6
    gen = torch.Generator().manual_seed(seed)
    p = torch.distributions.Dirichlet(torch.full((V,), 0.6, dtype=torch.float64)).sample((1,))
    q = torch.distributions.Dirichlet(torch.full((V,), 0.6, dtype=torch.float64)).sample((1,))
    q = (q + 1e-3) / (q + 1e-3).sum(-1, keepdim=True)
    if wor:
        d = torch.multinomial(q[0], n, replacement=False, generator=gen)
        rrs, law = RRSWORVerifier(), DraftLaw.WOR
    else:
        d = torch.multinomial(q[0], n, replacement=True, generator=gen)
        rrs, law = RRSVerifier(), DraftLaw.IID
    leaves = torch.distributions.Dirichlet(torch.ones(V, dtype=torch.float64)).sample((n,))
    P = torch.cat([p, leaves])
    Q = torch.cat([q, leaves])
    out = traversal_output_law(P, Q, torch.cat([torch.tensor([0]), d]), [-1] + [0] * n, law)
    emitted = out[0].clone()  # first committed token: the correction, or the accepted child's token
    for j in range(n):
        emitted[d[j]] += out[1 + j].sum()
        assert torch.allclose(out[1 + j], out[1 + j].sum() * leaves[j], atol=1e-12)  # bonus from p
    pi = rrs.output_distribution(p, q, d.view(1, n))[0]
    assert torch.allclose(emitted, pi, atol=1e-12)


def test_expected_accepted_against_token_level():
    """In expectation over the draft trees, traversal verification accepts at least as many drafts
    as token-level tree verification on these cases (the gain the paper reports)."""
    gains = []
    for parents in SHAPES:
        for kind in ("dirichlet", "sparse", "close"):
            for seed in range(3):
                tables = Tables(3, seed, kind)
                _, e_trav, _ = tree_committed(tables, parents, DraftLaw.IID, _trav)
                _, e_tok, _ = tree_committed(tables, parents, DraftLaw.IID, token_level_tree_law)
                assert e_trav >= e_tok - 1e-12, (parents, kind, seed)
                gains.append(e_trav - e_tok)
    assert max(gains) > 1e-3


# ------------------------------------------------------------------------------ verify_tree sampling
@pytest.mark.parametrize("cls,law,parents", [
    (TraversalVerifier, DraftLaw.IID, [-1, 0, 1, 0, 3]),
    (TraversalWORVerifier, DraftLaw.WOR, [-1, 0, 1, 1, 0]),
])
def test_verify_tree_matches_enumerated_law(cls, law, parents):
    tables = Tables(4, 11, "dirichlet")
    trees = list(enumerate_trees(tables, parents, law))
    toks, _ = max(trees, key=lambda t: t[1])
    p, q = tree_rows(tables, toks, parents)
    exact = traversal_output_law(p, q, torch.tensor(toks), parents, law)
    cells = {(int(v), int(y)): float(exact[v, y]) for v, y in zip(*np.nonzero(exact.numpy() > 0))}
    v = cls()
    gen = torch.Generator().manual_seed(42)
    pre = node_prefixes(toks, parents)
    counts: Counter = Counter()
    n = 6000
    tk, par = torch.tensor(toks), torch.tensor(parents)
    for _ in range(n):
        out = v.verify_tree(p, q, tk, par, gen)
        end = out.path[-1] if out.path else 0
        assert tuple(out.tokens[:-1]) == pre[end]
        assert all(parents[b] == a for a, b in zip((0, *out.path), out.path))
        counts[(end, out.tokens[-1])] += 1
    assert _chi2(counts, cells, n) > 1e-4


def test_end_to_end_sampling_matches_target():
    """Trees drawn i.i.d. from the draft model, verified by verify_tree and completed by the target
    model: the first depth + 1 tokens follow the target model's joint law (chi-square)."""
    tables = Tables(3, 4, "sparse")
    parents = [-1, 0, 0, 1, 2]
    L, n = 3, 6000
    rng = np.random.default_rng(2)
    gen = torch.Generator().manual_seed(2)
    v = get_verifier("traversal")
    counts: Counter = Counter()
    par = torch.tensor(parents)
    for _ in range(n):
        toks = [0]
        for i in range(1, len(parents)):
            pre = node_prefixes(toks + [0], parents[: i + 1])[parents[i]]
            toks.append(int(rng.choice(3, p=tables.q(pre))))
        p, q = tree_rows(tables, toks, parents)
        out = v.verify_tree(p, q, torch.tensor(toks), par, gen)
        s = tuple(out.tokens)
        while len(s) < L:
            s += (int(rng.choice(3, p=tables.p(s))),)
        counts[s[:L]] += 1
    assert _chi2(counts, target_joint(tables, L), n) > 1e-4


def test_large_vocabulary_tree_float32():
    V = 49152
    parents = [-1, 0, 0, 1, 1, 2, 3]
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(len(parents), V, generator=gen) * 3
    p = torch.softmax(logits, -1)
    q = torch.softmax(logits + torch.randn(len(parents), V, generator=gen), -1)
    toks = [5]
    for i in range(1, len(parents)):
        toks.append(int(torch.multinomial(q[parents[i]], 1, generator=gen)))
    out = TraversalVerifier().verify_tree(p, q, torch.tensor(toks), torch.tensor(parents), gen)
    assert len(out.tokens) == len(out.path) + 1 and 0 <= out.tokens[-1] < V
    a, F, order, base = traversal_weights(p, q, torch.tensor(toks), parents)
    assert base == list(range(len(parents)))
    assert order[-1] == 0 and float(a[0]) == 1.0 and ((a >= 0) & (a <= 1)).all()
    assert abs(float(traversal_output_law(p, q, torch.tensor(toks), parents).sum()) - 1) < 1e-9


# ------------------------------------------------------------------------------------ interface
def test_registry_and_construction():
    v = get_verifier("traversal")
    assert isinstance(v, SequenceVerifier) and not v.chains_only
    v.check_construction("iid", 3)
    with pytest.raises(ValueError, match="not valid"):
        v.check_construction("wor", 3)
    w = TraversalWORVerifier()
    w.check_construction("wor", 3)
    with pytest.raises(ValueError, match="not valid"):
        w.check_construction("iid", 3)


def test_post_order():
    children, order = tree_structure([-1, 0, 1, 0, 3, 3])
    assert children == [[1, 3], [2], [], [4, 5], [], []]
    assert order == [2, 1, 4, 5, 3, 0]


def test_input_errors():
    v = TraversalVerifier()
    p = torch.tensor([[0.5, 0.5, 0.0]] * 3, dtype=torch.float64)
    q = torch.tensor([[0.2, 0.3, 0.5]] * 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="precede"):
        v.verify_tree(p, q, torch.tensor([0, 1, 1]), torch.tensor([-1, 2, 0]))
    with pytest.raises(ValueError, match="root"):
        v.verify_tree(p, q, torch.tensor([0, 1, 1]), torch.tensor([0, 0, 0]))
    q0 = q.clone()
    q0[0] = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    with pytest.raises(ValueError, match="q\\(x\\) = 0"):
        v.verify_tree(p, q0, torch.tensor([0, 1, 2]), torch.tensor([-1, 0, 0]))
    with pytest.raises(ValueError, match="outside"):
        v.verify_tree(p, q, torch.tensor([0, 1, 5]), torch.tensor([-1, 0, 0]))
    with pytest.raises(ValueError, match="shape"):
        v.verify_tree(p, q, torch.tensor([0, 1]), torch.tensor([-1, 0, 0]))
    with pytest.raises(ValueError, match="iid"):
        traversal_weights(p, q, torch.tensor([0, 1, 1]), [-1, 0, 0], "greedy")
    q_leaf = q.clone()
    q_leaf[1:] = 0.0  # leaf rows of q are unused
    v.verify_tree(p, q_leaf, torch.tensor([0, 1, 1]), torch.tensor([-1, 0, 0]))


def test_host_syncs(host_conversions):
    """verify_tree reads ``parents`` once and the result once: two ``.tolist()`` calls, nothing else."""
    calls = host_conversions
    parents = [-1, 0, 1, 0, 3, 3]
    tables = Tables(4, 5, "dirichlet")
    toks = [0, 1, 2, 1, 0, 3]
    p, q = tree_rows(tables, toks, parents)
    tk, par = torch.tensor(toks), torch.tensor(parents)
    gen = torch.Generator().manual_seed(0)
    calls.clear()
    TraversalWORVerifier().verify_tree(p, q, tk, par, gen)
    TraversalVerifier().verify_tree(p, q, tk, par, gen)
    assert calls == ["tolist", "tolist"] * 2


# ------------------------------------------------------------------ merged repeated draws (engine trees)
def merged_tree(seqs):
    """The tree of K draft sequences with repeated draws of one token merged into one node (as
    specot.drafting.DraftTree builds it): ``(tokens, parents, drafts)``, ``drafts[u]`` the draws at u
    with multiplicity in draw order."""
    toks, par, child, drafts = [0], [-1], {}, {}
    for s in seqs:
        node = 0
        for x in s:
            drafts.setdefault(node, []).append(x)
            if (node, x) not in child:
                child[(node, x)] = len(toks)
                toks.append(x)
                par.append(node)
            node = child[(node, x)]
    return toks, par, drafts  # nodes in order of first draw: parents precede children


def sequences_law(tables: Tables, K: int, L: int, use_drafts: bool):
    committed: dict = {}
    for flat in itertools.product(range(tables.V), repeat=K * L):
        seqs = [flat[i * L:(i + 1) * L] for i in range(K)]
        pr = 1.0
        for s in seqs:
            for i in range(L):
                pr *= tables.q(s[:i])[s[i]]
        if pr == 0:
            continue
        toks, par, drafts = merged_tree(seqs)
        p, q = tree_rows(tables, toks, par)
        law = traversal_output_law(p, q, torch.tensor(toks), par, drafts=drafts if use_drafts else None)
        committed_from_law(law, toks, par, pr, committed)
    return committed


@pytest.mark.parametrize("K,L,kind,seed", [(2, 2, "dirichlet", 0), (3, 2, "dirichlet", 1), (2, 3, "sparse", 2),
                                           (3, 2, "close", 3), (2, 2, "onehot_q", 4)])
def test_merged_iid_sequences_lossless_with_drafts(K, L, kind, seed):
    """K i.i.d. draft sequences merged into a tree (repeated draws share a node): exact when the
    draws with multiplicity are passed; the same rule on the merged tree alone is not (control)."""
    tables = Tables(3, seed, kind)
    want = target_joint(tables, L + 1)
    assert max_gap(extend_to(sequences_law(tables, K, L, True), tables, L + 1), want) < TOL
    if kind == "dirichlet":
        assert max_gap(extend_to(sequences_law(tables, K, L, False), tables, L + 1), want) > 1e-3


def test_expand_tree():
    toks, par, drafts = merged_tree([(1, 2), (1, 0), (2, 2)])
    assert toks == [0, 1, 2, 0, 2, 2] and par == [-1, 0, 1, 1, 0, 4] and drafts == {0: [1, 1, 2], 1: [2, 0], 4: [2]}
    children, _ = tree_structure(par)
    kids, base, order, draw_tok = expand_tree(children, drafts)
    assert kids[0] == [1, 6, 4] and kids[1] == [2, 3] and kids[4] == [5] and base == [0, 1, 2, 3, 4, 5, 1]
    assert order == [2, 3, 1, 6, 5, 4, 0] and draw_tok == [-1, 1, 2, 0, 2, 2, 1]
    toks, par, drafts = merged_tree([(1, 2), (1, 2), (2, 0)])
    assert toks == [0, 1, 2, 2, 0] and par == [-1, 0, 1, 0, 3]
    children, _ = tree_structure(par)
    kids, base, order, _ = expand_tree(children, drafts)
    assert kids[0] == [1, 5, 3] and kids[1] == [2, 6] and base[5:] == [1, 2]
    assert order == [2, 6, 1, 5, 4, 3, 0]
    assert expand_tree(children, None)[0] == children
    with pytest.raises(ValueError, match="distinct"):
        expand_tree(children, {0: [1, 2, 0]})


def test_verify_tree_with_drafts_matches_law():
    tables = Tables(3, 8, "dirichlet")
    toks, par, drafts = merged_tree([(1, 2), (1, 2), (2, 0)])
    p, q = tree_rows(tables, toks, par)
    exact = traversal_output_law(p, q, torch.tensor(toks), par, drafts=drafts)
    cells = {(int(v), int(y)): float(exact[v, y]) for v, y in zip(*np.nonzero(exact.numpy() > 0))}
    v = TraversalVerifier()
    gen = torch.Generator().manual_seed(8)
    counts: Counter = Counter()
    n = 6000
    tk, pt = torch.tensor(toks), torch.tensor(par)
    for _ in range(n):
        out = v.verify_tree(p, q, tk, pt, gen, drafts=drafts)
        counts[(out.path[-1] if out.path else 0, out.tokens[-1])] += 1
    assert _chi2(counts, cells, n) > 1e-4
    with pytest.raises(ValueError, match="drafts"):
        v.verify_tree(p, q, tk, pt, gen, drafts={0: [2, 2, 1], 1: [2, 2], 3: [0]})  # first draws out of order
