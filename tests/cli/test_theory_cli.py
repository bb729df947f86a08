"""``specot theory`` CLI: alpha (npy / pt inputs, verifiers), speedup table, plots, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from specot.cli.main import main


@pytest.fixture()
def prob_files(tmp_path):  # noqa: ANN001, ANN201
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    np.save(tmp_path / "p.npy", p)
    torch.save(torch.from_numpy(q), tmp_path / "q.pt")
    return tmp_path / "p.npy", tmp_path / "q.pt", p, q


def test_alpha_prints_each_law_and_verifiers(prob_files, capsys, tmp_path) -> None:  # noqa: ANN001
    from specot.theory import optimal_acceptance

    pf, qf, p, q = prob_files
    out_json = tmp_path / "a.json"
    rc = main(["theory", "alpha", "--target-probs", str(pf), "--draft-probs", str(qf), "--n", "2", "--verifiers", "--json", str(out_json)])
    assert rc == 0
    text = capsys.readouterr().out
    for law in ("iid", "wor", "cps", "greedy"):
        assert f"alpha*[{law}]" in text
    assert "verifier otm" in text
    res = json.loads(out_json.read_text())
    assert abs(res["wor"]["alpha"] - optimal_acceptance(p, q, 2, "wor").alpha) < 1e-12
    # the OTM verifier reaches alpha* for its law
    assert abs(float(res["iid"]["verifiers"]["otm"]) - res["iid"]["alpha"]) < 1e-8


def test_alpha_single_law(prob_files, capsys) -> None:  # noqa: ANN001
    pf, qf, _, _ = prob_files
    assert main(["theory", "alpha", "--target-probs", str(pf), "--draft-probs", str(qf), "--n", "3", "--law", "cps"]) == 0
    text = capsys.readouterr().out
    assert "alpha*[cps]" in text and "conditional Poisson" in text and "alpha*[wor]" not in text


def test_alpha_bad_inputs(prob_files, tmp_path, capsys) -> None:  # noqa: ANN001
    pf, qf, _, _ = prob_files
    np.save(tmp_path / "bad.npy", np.array([0.5, 0.7, 0.1, 0.1, 0.1, 0.1]))
    assert main(["theory", "alpha", "--target-probs", str(tmp_path / "bad.npy"), "--draft-probs", str(qf), "--n", "2"]) == 1
    assert "sum to 1" in capsys.readouterr().err
    assert main(["theory", "alpha", "--target-probs", str(tmp_path / "missing.npy"), "--draft-probs", str(qf), "--n", "2"]) == 1
    (tmp_path / "x.txt").write_text("1")
    assert main(["theory", "alpha", "--target-probs", str(tmp_path / "x.txt"), "--draft-probs", str(qf), "--n", "2"]) == 1
    with pytest.raises(SystemExit):
        main(["theory", "alpha", "--target-probs", str(pf), "--draft-probs", str(qf), "--n", "0"])
    with pytest.raises(SystemExit):
        main(["theory", "alpha", "--target-probs", str(pf), "--draft-probs", str(qf), "--n", "2", "--law", "nope"])


def test_speedup_table(capsys) -> None:  # noqa: ANN001
    assert main(["theory", "speedup", "--alpha", "0.8", "--c", "0.1", "--c-hat", "0.05"]) == 0
    text = capsys.readouterr().out
    assert "<- optimal" in text and "optimal gamma = 6" in text and "ops factor" in text
    with pytest.raises(SystemExit):
        main(["theory", "speedup", "--alpha", "1.5", "--c", "0.1"])


@pytest.mark.slow
def test_plots(tmp_path, capsys) -> None:  # noqa: ANN001
    assert main(["theory", "plots", "--out", str(tmp_path / "figs")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "figs").glob("*.png"))
    assert pngs == sorted(
        ["spectr_fig4_bernoulli.png", "spectr_fig5_uniform.png", "spectr_fig6_bernoulli_rrs.png", "speedup_vs_gamma.png", "alpha_by_law.png"]
    )
    for name in pngs:
        assert (tmp_path / "figs" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
