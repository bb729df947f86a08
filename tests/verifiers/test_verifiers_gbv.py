"""Greedy multi-path block verification (``gbv``): exactness by enumerating every draw of K i.i.d.
candidate paths (V <= 5, K = 2-3, L <= 3), planted defects that the enumeration catches, block
efficiency at least block verification's on the first path, reductions (K = 1: block verification),
the draft-law contract, and a seeded sampling test of ``verify_paths``.

False-failure rate: the one sampling test is seeded (deterministic); with its p-value threshold of
1e-4 a correct implementation fails on a fresh seed with probability at most 1e-4.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import torch
from test_verifiers_block import Tables, _chi2, extend_to, max_gap, target_joint

import specot.verifiers.traversal as traversal_mod
from specot.verifiers import (
    DraftLaw,
    GBVVerifier,
    block_expected_accepted,
    block_output_law,
    gbv_expected_accepted,
    gbv_output_law,
    get_verifier,
    paths_to_tree,
    traversal_output_law,
)

TOL = 1e-10
KINDS = ["dirichlet", "sparse", "equal", "disjoint", "onehot_p", "close"]


def path_rows(tables: Tables, paths: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``p, q [K, L + 1, V]`` float64: row i of path k after its first i tokens."""
    p = [[tables.p(tuple(x[:i])) for i in range(len(x) + 1)] for x in paths]
    q = [[tables.q(tuple(x[:i])) for i in range(len(x) + 1)] for x in paths]
    return torch.tensor(np.array(p), dtype=torch.float64), torch.tensor(np.array(q), dtype=torch.float64)


def enumerate_paths(tables: Tables, K: int, L: int):
    """Every draw of K i.i.d. draft-model paths of length L with its probability."""
    for flat in itertools.product(range(tables.V), repeat=K * L):
        paths = [list(flat[k * L:(k + 1) * L]) for k in range(K)]
        prob = 1.0
        for x in paths:
            for i in range(L):
                prob *= tables.q(tuple(x[:i]))[x[i]]
                if prob == 0.0:
                    break
            if prob == 0.0:
                break
        if prob > 0:
            yield paths, prob


def committed(law: torch.Tensor, paths: list[list[int]], weight: float, into: dict) -> None:
    """Add ``weight ×`` a law over the prefix tree of ``paths`` to a dict of committed sequences."""
    tokens, parents, _, _ = paths_to_tree(torch.tensor(paths))
    pre: list[tuple[int, ...]] = [()]
    for v in range(1, tokens.shape[0]):
        pre.append(pre[int(parents[v])] + (int(tokens[v]),))
    lw = law.numpy()
    for v, y in zip(*np.nonzero(lw)):
        s = pre[v] + (int(y),)
        into[s] = into.get(s, 0.0) + weight * float(lw[v, y])


def enumerate_gbv(tables: Tables, K: int, L: int, law_fn=None) -> tuple[dict, float, float]:
    """``(committed law extended to L + 1 tokens, E[τ] of gbv, E[τ] of block on path 1)``."""
    out: dict = {}
    e_gbv = e_block = 0.0
    for paths, prob in enumerate_paths(tables, K, L):
        p, q = path_rows(tables, paths)
        x = torch.tensor(paths)
        law = (law_fn or (lambda a, b, c: gbv_output_law(a, b, c)[0]))(p, q, x)
        assert torch.isfinite(law).all() and (law >= -1e-15).all()
        assert abs(float(law.sum()) - 1.0) < 1e-12
        committed(law, paths, prob, out)
        if law_fn is None:
            e_gbv += prob * float(gbv_expected_accepted(p, q, x))
            e_block += prob * float(block_expected_accepted(p[0], q[0], x[0]))
    return extend_to(out, tables, L + 1), e_gbv, e_block


CASES = [(V, K, L, kind, seed) for (V, K, L) in [(3, 2, 1), (3, 2, 2), (3, 3, 2), (4, 2, 2), (3, 2, 3), (5, 2, 2)]
         for kind in KINDS for seed in (0, 1)]


@pytest.mark.parametrize("V,K,L,kind,seed", CASES)
def test_gbv_is_lossless_and_beats_block(V, K, L, kind, seed):
    t = Tables(V, seed, kind)
    law, e_gbv, e_block = enumerate_gbv(t, K, L)
    assert max_gap(law, target_joint(t, L + 1)) < TOL
    assert e_gbv >= e_block - 1e-12


def test_gbv_raises_block_efficiency_on_a_dense_case():
    """Two paths instead of one: the block efficiency (E[τ] + 1) grows by a stated margin."""
    t = Tables(4, 3, "dirichlet")
    _, e_gbv, e_block = enumerate_gbv(t, 2, 2)
    assert (1 + e_gbv) / (1 + e_block) > 1.05  # 1.727 / 1.625 = 1.063


def _merged_without_draws(p, q, x):
    """Defect 1: the prefix tree verified without its draw multiplicities (a repeated draw of one
    token dropped, as if the node had been drawn once)."""
    tokens, parents, _, node_of = paths_to_tree(x)
    first = {}
    for j, u in enumerate(node_of.reshape(-1).tolist()):
        first.setdefault(u, j)
    pick = torch.tensor([first[u] for u in range(tokens.shape[0])])
    V = p.shape[-1]
    P = p.reshape(-1, V)[pick]
    Q = q.reshape(-1, V)[pick]
    return traversal_output_law(P, Q, tokens, parents, DraftLaw.IID, None)


def _no_residual(w, P, Q, xv, wor, tiny):
    """Defect 2: after a rejected draw the parent keeps its target row (no block residual)."""
    r = (w * P - Q).clamp_min(0.0)
    S = r.sum()
    den = S + 1.0 - w
    w_new = torch.where(den > 0, S / den.clamp_min(tiny), torch.ones_like(S))
    return w_new, P, Q


def test_planted_defects_are_caught(monkeypatch):
    t = Tables(3, 0, "dirichlet")
    law, _, _ = enumerate_gbv(t, 2, 2, law_fn=_merged_without_draws)
    assert max_gap(law, target_joint(t, 3)) > 1e-3
    monkeypatch.setattr(traversal_mod, "_reject", _no_residual)
    law, _, _ = enumerate_gbv(t, 2, 2, law_fn=lambda a, b, c: gbv_output_law(a, b, c)[0])
    assert max_gap(law, target_joint(t, 3)) > 1e-3


def test_one_path_is_block_verification():
    t = Tables(4, 2, "dirichlet")
    for paths, _ in itertools.islice(enumerate_paths(t, 1, 3), 40):
        p, q = path_rows(t, paths)
        law, _ = gbv_output_law(p, q, torch.tensor(paths))
        assert torch.allclose(law, block_output_law(p[0], q[0], torch.tensor(paths[0])), atol=1e-13)


def test_paths_to_tree_layout():
    tokens, parents, drafts, node_of = paths_to_tree(torch.tensor([[1, 2], [3, 0], [1, 4]]))
    assert tokens.tolist() == [0, 1, 3, 2, 0, 4]  # depth by depth, in order of the first path through
    assert parents.tolist() == [-1, 0, 0, 1, 2, 1]
    assert drafts == {0: [1, 3, 1], 1: [2, 4], 2: [0]}
    assert node_of.tolist() == [[0, 1, 3], [0, 2, 4], [0, 1, 5]]
    with pytest.raises(ValueError):
        paths_to_tree(torch.zeros(3))


def test_draft_law_contract():
    v = get_verifier("gbv")
    assert isinstance(v, GBVVerifier)
    v.check_construction(DraftLaw.IID, 8)
    for law in (DraftLaw.WOR, DraftLaw.GREEDY, DraftLaw.SPECHUB):
        v.check_construction(law, 1)  # one draft per node: a single draw from q
        with pytest.raises(ValueError, match="not valid"):
            v.check_construction(law, 2)


def test_verify_paths_matches_enumerated_law():
    t = Tables(3, 4, "dirichlet")
    paths = [[0, 1], [2, 2], [0, 0]]
    p, q = path_rows(t, paths)
    x = torch.tensor(paths)
    law, node_of = gbv_output_law(p, q, x)
    tokens, parents, _, _ = paths_to_tree(x)
    cells = {(v, y): float(law[v, y]) for v, y in zip(*np.nonzero(law.numpy()))}
    g = torch.Generator().manual_seed(11)
    ver = GBVVerifier()
    n = 20000
    counts: Counter = Counter()
    for _ in range(n):
        k, out = ver.verify_paths(p, q, x, g)
        v = out.path[-1] if out.path else 0
        assert list(out.tokens[:-1]) == paths[k][:len(out.path)]
        assert int(node_of[k, len(out.path)]) == v
        counts[(v, out.tokens[-1])] += 1
    assert set(counts) <= set(cells)
    assert _chi2(counts, cells, n) > 1e-4


def test_input_errors():
    v = GBVVerifier()
    p = torch.full((2, 3, 4), 0.25, dtype=torch.float64)
    with pytest.raises(ValueError, match="paths"):
        v.verify_paths(p, p, torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"\[K, L \+ 1, V\]"):
        v.verify_paths(p[0], p[0], torch.zeros(2, 2, dtype=torch.int64))
