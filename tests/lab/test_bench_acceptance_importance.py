"""specot bench acceptance: the importance-weighted multi-draft verifier's rows (Khisti et al., ICLR
2025) — present for the i.i.d. law only, a Rao–Blackwellised MC estimate that agrees with exact
enumeration, its closed-form lower bound, and the table's α / gap columns."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from model_helpers import tiny_lm
from specot_lab.bench.acceptance import (LAW_VERIFIERS, MC_VERIFIERS, BenchDraft, _verifier_acceptance,
                                         reduce_vocab, run_acceptance_bench)
from specot_lab.bench.report import acceptance_table


@pytest.fixture(scope="module")
def tiny_result():
    tgt = tiny_lm(0, vocab=16)
    draft = BenchDraft("tiny-draft", "model", tiny_lm(1, vocab=16))
    return run_acceptance_bench(target=tgt, drafts=[draft], prompts=[[1, 2, 3, 4], [5, 6, 7]], temperatures=[1.0],
                                ns=[1, 2, 3], max_new_tokens=8, mc_samples=16, progress=False)


def test_importance_is_an_iid_row_only():
    assert "importance" in LAW_VERIFIERS["iid"] and "importance" in MC_VERIFIERS
    # its selection marginal assumes independent draws: not offered for without-replacement drafts
    assert all("importance" not in v for law, v in LAW_VERIFIERS.items() if law != "iid")


def test_importance_rows(tiny_result):
    rows = [r for r in tiny_result["rows"] if r["verifier"] == "importance"]
    assert {(r["n"], r["law"]) for r in rows} == {(2, "iid"), (3, "iid")}
    json.loads(json.dumps(tiny_result))
    for r in rows:
        assert r["acceptance_method"] == "rao-blackwell-mc(16/position; selected-draft term closed-form)"
        lb = r["acceptance_lower_bound"]
        assert lb is not None and 0.0 <= lb <= r["acceptance"] + 1e-9  # selected draft accepted ⊂ accepted
        assert r["gap"] >= -0.03, r  # alpha* is the optimum (MC noise only)
        assert abs(r["sampled_acceptance"] - r["acceptance"]) < 0.35
    for r in tiny_result["rows"]:
        if r["verifier"] != "importance":
            assert r["acceptance_lower_bound"] is None


def test_mc_acceptance_matches_exact_enumeration():
    from specot.verifiers import get_verifier

    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(6, 9, generator=g, dtype=torch.float64) * 1.5, -1)
    q = torch.softmax(torch.randn(6, 9, generator=g, dtype=torch.float64) * 1.5, -1)
    n_eff = torch.full((6,), 3)
    est, _, method, lb = _verifier_acceptance("importance", "iid", p, q, n_eff, 400, g)
    exact = get_verifier("importance").acceptance(p, q, 3, method="exact").value.numpy()
    assert method.startswith("rao-blackwell-mc(400/position")
    # only the small correction-lands-on-a-draft term is sampled: close to exact per position
    assert np.abs(est - exact).max() < 0.005
    assert (lb <= exact + 1e-12).all() and (lb <= est + 1e-12).all()


def test_reduce_vocab_is_exact_for_importance_selection():
    from specot.verifiers import get_verifier

    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(3, 200, generator=g, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(3, 200, generator=g, dtype=torch.float64) * 2, -1)
    q[:, 100:] = 0.0  # tokens q never drafts are lumped into one: the ratio ranking keeps their p mass on top
    q = q / q.sum(-1, keepdim=True)
    pr, qr = reduce_vocab(p, q, eps=0.0, min_keep=8)
    v = get_verifier("importance")
    for n in (2, 4):
        assert torch.allclose(v.selected_acceptance(p, q, n), v.selected_acceptance(pr, qr, n), atol=1e-12)


def test_table_shows_alpha_and_gap(tiny_result):
    md = acceptance_table(tiny_result)
    head = md.splitlines()[0]
    assert "α [95% CI]" in head and "gap α*−α" in head and "gap/α*" in head
    imp = [ln for ln in md.splitlines() if "| importance |" in ln]
    assert len(imp) == 2 and all("(MC)" in ln and ln.rstrip().endswith("% |") for ln in imp)
