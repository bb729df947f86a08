"""specot bench acceptance: the exactly optimal i.i.d. verifier's rows (``ot``) — an iid row only,
exact, its acceptance equal to the paired α*_iid (gap zero up to rounding) and never below the other
i.i.d. verifiers' exact rows, its sampled acceptance within the band of the exact mean, and the
vocabulary reduction exact for it."""

from __future__ import annotations

import pytest
import torch

from model_helpers import tiny_lm
from specot_lab.bench.acceptance import LAW_VERIFIERS, MC_VERIFIERS, BenchDraft, reduce_vocab, run_acceptance_bench
from specot_lab.bench.report import acceptance_table


@pytest.fixture(scope="module")
def tiny_result():
    tgt = tiny_lm(0, vocab=16)
    draft = BenchDraft("tiny-draft", "model", tiny_lm(1, vocab=16))
    return run_acceptance_bench(target=tgt, drafts=[draft], prompts=[[1, 2, 3, 4], [5, 6, 7]], temperatures=[0.6, 1.0],
                                ns=[1, 2, 3, 4], max_new_tokens=8, mc_samples=8, progress=False)


def test_ot_is_an_exact_iid_row_only():
    assert "ot" in LAW_VERIFIERS["iid"] and "ot" not in MC_VERIFIERS
    assert all("ot" not in v for law, v in LAW_VERIFIERS.items() if law != "iid")


def test_ot_rows_reach_alpha_star(tiny_result):
    rows = {(r["temperature"], r["n"], r["verifier"]): r for r in tiny_result["rows"] if r["law"] == "iid"}
    ot = [r for r in tiny_result["rows"] if r["verifier"] == "ot"]
    assert {(r["n"], r["law"]) for r in ot} == {(2, "iid"), (3, "iid"), (4, "iid")}
    for r in ot:
        assert r["acceptance_method"] == "exact"
        assert abs(r["gap"]) < 1e-9, r  # ot's acceptance IS α*_iid at every position
        assert abs(r["sampled_acceptance"] - r["acceptance"]) < 0.35
        for other in ("kseq", "rrs"):  # exact rows of suboptimal verifiers at the same positions
            assert r["acceptance"] >= rows[(r["temperature"], r["n"], other)]["acceptance"] - 1e-12


def test_reduce_vocab_is_exact_for_ot():
    from specot.verifiers import get_verifier

    g = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(3, 200, generator=g, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(3, 200, generator=g, dtype=torch.float64) * 2, -1)
    q[:, 120:] = 0.0
    q = q / q.sum(-1, keepdim=True)
    pr, qr = reduce_vocab(p, q, eps=0.0, min_keep=8)
    v = get_verifier("ot")
    for n in (2, 4, 8):
        assert torch.allclose(v.acceptance(p, q, n).value, v.acceptance(pr, qr, n).value, atol=1e-12), n


def test_table_lists_ot(tiny_result):
    md = acceptance_table(tiny_result)
    assert any("| ot |" in ln for ln in md.splitlines())
