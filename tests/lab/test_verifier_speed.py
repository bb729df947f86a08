"""``specot bench verifier-speed``'s ``ot`` rows: every distribution and n is measured and reported
with its α* (a small vocabulary; the timings themselves are not checked)."""

from __future__ import annotations

import json

import pytest
import torch

from specot.cli.main import main
from specot.theory import optimal_acceptance
from specot_lab.bench import verifier_speed


def test_ot_inputs_are_distributions_of_the_named_shape():
    for kind in verifier_speed.OT_DISTRIBUTIONS:
        p, q = verifier_speed.ot_inputs(kind, vocab=300)
        assert p.shape == q.shape == (1, 300) and p.dtype == torch.float32
        assert torch.allclose(p.sum(-1), torch.ones(1)) and torch.allclose(q.sum(-1), torch.ones(1))
    p, q = verifier_speed.ot_inputs("q=p", vocab=300)
    assert torch.equal(p, q)
    p, q = verifier_speed.ot_inputs("top-50", vocab=300)
    assert int((p > 0).sum()) == 50 and int((q > 0).sum()) == 50
    with pytest.raises(ValueError, match="unknown distribution"):
        verifier_speed.ot_inputs("zipf")


def test_measure_ot_reports_every_row_with_alpha_star():
    rows = verifier_speed.measure_ot(quick=True, vocab=300)
    assert [(r["dist"], r["n"]) for r in rows] == [(k, n) for k in verifier_speed.OT_DISTRIBUTIONS
                                                   for n in verifier_speed.OT_NS]
    for r in rows:
        p, q = (t[0].double().numpy() for t in verifier_speed.ot_inputs(r["dist"], vocab=300))
        alpha = optimal_acceptance(p / p.sum(), q / q.sum(), r["n"], "iid").alpha
        assert r["alpha"] == pytest.approx(alpha, abs=1e-9)
        assert r["ms_per_position"] > 0 and r["B"] == 1 and r["verifier"] == "ot"


def test_only_ot_through_the_cli(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(verifier_speed, "measure_ot", lambda quick: seen.append(quick) or [
        {"verifier": "ot", "law": "iid", "dist": "flat", "B": 1, "n": 4, "ms_per_call": 1.0,
         "ms_per_position": 1.0, "repeats": 5, "alpha": 0.9}])
    out = tmp_path / "ot.json"
    assert main(["bench", "verifier-speed", "--verifier", "ot", "--quick", "--out", str(out)]) == 0
    assert seen == [True]
    assert [r["dist"] for r in json.loads(out.read_text())["results"]] == ["flat"]


def test_real_rows_time_ot_and_kseq_on_every_position(monkeypatch):
    """``--real``: one row per verifier and n over all positions given (here crafted ones; the real
    ones come from the models), with the spread reported."""
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(5, 200, generator=g), -1)
    q = torch.softmax(3 * torch.randn(5, 200, generator=g), -1)
    monkeypatch.setattr(verifier_speed, "real_positions", lambda draft, temperature: (p, q))
    rows = verifier_speed.measure_real("tiny", 1.0)
    assert [(r["verifier"], r["n"]) for r in rows] == [(v, n) for n in verifier_speed.OT_NS for v in ("ot", "kseq")]
    for r in rows:
        assert r["positions"] == 5 and r["dist"] == "real:tiny:T=1"
        assert 0 < r["ms_per_position"] <= r["p90_ms"] <= r["max_ms"]
