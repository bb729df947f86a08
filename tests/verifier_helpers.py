"""Shared helpers for the verifier and draft-law tests (exact enumeration, chi-square)."""

from __future__ import annotations

import numpy as np
import scipy.stats
import torch
from hypothesis import strategies as st

from specot.laws import enumerate_draft_law
from specot.verifiers import DraftLaw, get_verifier

# (verifier name, draft law, constructor params, allowed n)
LOSSLESS = [
    ("speculative", DraftLaw.IID, {}, (1,)),
    ("kseq", DraftLaw.IID, {}, (1, 2, 3)),
    ("rrs", DraftLaw.IID, {}, (1, 2, 3)),
    ("rrs_wor", DraftLaw.WOR, {}, (1, 2, 3)),
    ("greedy", DraftLaw.GREEDY, {}, (1, 2, 3)),
    ("spechub", DraftLaw.SPECHUB, {}, (1, 2)),
    ("otm", DraftLaw.IID, {"law": "iid"}, (1, 2, 3)),
    ("otm", DraftLaw.WOR, {"law": "wor"}, (2, 3)),
    ("otm", DraftLaw.GREEDY, {"law": "greedy"}, (2, 3)),
    ("otm", DraftLaw.SPECHUB, {"law": "spechub"}, (2,)),
]


def enumerate_emitted(verifier, p: torch.Tensor, q: torch.Tensor, n: int, law: DraftLaw):
    """Exact emitted distribution ``[V]`` and acceptance (float64) by enumerating every draft tuple."""
    tuples, probs = enumerate_draft_law(q.to(torch.float64), n, law)
    m = tuples.shape[0]
    pe, qe = p.unsqueeze(0).expand(m, -1), q.unsqueeze(0).expand(m, -1)
    pi = verifier.output_distribution(pe, qe, tuples).to(torch.float64)
    acc = verifier.accept_probability(pe, qe, tuples).to(torch.float64)
    assert torch.isfinite(pi).all() and torch.isfinite(acc).all()
    assert (pi >= -1e-15).all()
    assert torch.allclose(pi.sum(-1), torch.ones(m, dtype=torch.float64), atol=1e-9)
    return (probs.unsqueeze(-1) * pi).sum(0), float((probs * acc).sum())


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    """Pearson chi-square p-value, pooling cells with expected count below ``min_expected``."""
    total = counts.sum()
    exp = probs * total
    assert counts[exp == 0].sum() == 0, "a zero-probability outcome was observed"
    order = np.argsort(exp)
    c, e = counts[order].astype(float), exp[order]
    cells_c, cells_e, acc_c, acc_e = [], [], 0.0, 0.0
    for ci, ei in zip(c, e):
        acc_c += ci
        acc_e += ei
        if acc_e >= min_expected:
            cells_c.append(acc_c)
            cells_e.append(acc_e)
            acc_c = acc_e = 0.0
    if acc_e > 0 and cells_e:
        cells_c[-1] += acc_c
        cells_e[-1] += acc_e
    if len(cells_e) < 2:
        return 1.0
    return float(scipy.stats.chisquare(cells_c, cells_e).pvalue)


def make_verifier(name: str, params: dict):
    return get_verifier(name, **params)


@st.composite
def distributions(draw, V: int, allow_zero: bool = True):
    """A probability vector of length V (float64), possibly with zeros, ties or one-hot."""
    kind = draw(st.sampled_from(["dense", "sparse", "onehot", "ties", "uniform"]))
    if kind == "onehot":
        v = np.zeros(V)
        v[draw(st.integers(0, V - 1))] = 1.0
    elif kind == "uniform":
        v = np.ones(V)
    elif kind == "ties":
        levels = draw(st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=V, max_size=V))
        v = np.array(levels)
    else:
        w = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1.0)) if (kind == "sparse" and allow_zero)
                          else st.floats(1e-3, 1.0), min_size=V, max_size=V))
        v = np.array(w)
        if kind == "sparse":
            v[draw(st.integers(0, V - 1))] = 0.0
        if v.sum() <= 0:
            v[0] = 1.0
    v = v / v.sum()
    return torch.tensor(v, dtype=torch.float64)
