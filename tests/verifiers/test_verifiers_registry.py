"""Registry, draft-construction checks and input errors of the multi-draft verifiers."""

from __future__ import annotations

import pytest
import torch

from specot.verifiers import DraftLaw, available_verifiers, get_verifier

NAMES = ["greedy", "kseq", "lenient", "mentored", "otm", "rrs", "rrs_wor", "spechub", "speculative"]


def test_registry_lists_every_verifier():
    assert set(NAMES) <= set(available_verifiers())
    with pytest.raises(ValueError, match="available"):
        get_verifier("nope")


@pytest.mark.parametrize("name,good,bad", [
    ("kseq", DraftLaw.IID, DraftLaw.WOR), ("rrs", DraftLaw.IID, DraftLaw.GREEDY),
    ("rrs_wor", DraftLaw.WOR, DraftLaw.IID), ("greedy", DraftLaw.GREEDY, DraftLaw.IID),
    ("spechub", DraftLaw.SPECHUB, DraftLaw.WOR), ("otm", DraftLaw.IID, DraftLaw.WOR),
])
def test_check_construction(name, good, bad):
    v = get_verifier(name)
    v.check_construction(good, 2)
    with pytest.raises(ValueError, match="not valid"):
        v.check_construction(bad, 2)
    v.check_construction("iid", 1)  # one draft: every sampled law is one draw from q


def test_draft_count_limits():
    with pytest.raises(ValueError, match="drafts"):
        get_verifier("spechub").check_construction("spechub", 3)
    with pytest.raises(ValueError, match="drafts"):
        get_verifier("mentored").check_construction("iid", 2)
    get_verifier("otm", law="wor").check_construction("wor", 3)


def _pq():
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    q = torch.tensor([[0.4, 0.3, 0.3, 0.0]], dtype=torch.float64)
    return p, q


@pytest.mark.parametrize("name", ["kseq", "rrs", "rrs_wor", "greedy", "mentored", "otm"])
def test_draft_with_zero_draft_probability(name):
    p, q = _pq()
    d = torch.tensor([[3]])
    with pytest.raises(ValueError):
        get_verifier(name).verify(p, q, d)


def test_invalid_draft_constructions():
    p, q = _pq()
    with pytest.raises(ValueError, match="distinct"):
        get_verifier("rrs_wor").verify(p, q, torch.tensor([[0, 0]]))
    with pytest.raises(ValueError, match="top"):
        get_verifier("greedy").verify(p, q, torch.tensor([[2, 0]]))  # 2 is not the top-1 token
    with pytest.raises(ValueError, match="SpecHub"):
        get_verifier("spechub").verify(p, q, torch.tensor([[1, 2]]))  # neither draft is the top-1 token
    with pytest.raises(ValueError, match="probability 0"):
        get_verifier("otm", law="greedy").verify(p, q, torch.tensor([[1, 2]]))


def test_bad_inputs_are_rejected():
    p, q = _pq()
    v = get_verifier("kseq")
    with pytest.raises(ValueError, match="NaN"):
        v.verify(torch.full_like(p, float("nan")), q, torch.tensor([[0]]))
    with pytest.raises(ValueError, match="vocabulary"):
        v.verify(p, q[:, :3], torch.tensor([[0]]))
    with pytest.raises(ValueError, match="batch"):
        v.verify(p, q, torch.tensor([[0], [1]]))
    with pytest.raises(ValueError):
        get_verifier("otm", law="bogus")


def test_otm_size_limit():
    V = 400
    p = torch.full((1, V), 1.0 / V, dtype=torch.float64)
    with pytest.raises(ValueError, match="MAX_"):
        get_verifier("otm").acceptance(p, p, 2)
