"""specot bench speedup: tiny-model run (schema, methods, theory fields, HF peers), cost curve,
report/plots/README update, CLI parsing; the real-model --quick CLI is slow."""

from __future__ import annotations

import json

import pytest

from model_helpers import tiny_lm
from specot_lab.bench.acceptance import BenchDraft
from specot_lab.bench.report import results_markdown, speedup_plots, speedup_table, update_results, START, END
from specot_lab.bench.speedup import run_speedup_bench

ROW_KEYS = {"temperature", "method", "family", "drafts", "gamma", "verifier", "prompts", "tokens", "time_s", "target_calls",
            "tokens_per_s", "block_efficiency", "speedup", "speedup_vs_hf_ar", "speedup_per_prompt_mean",
            "speedup_per_prompt_ci95", "acceptance", "acceptance_per_depth", "overhead_share",
            "predicted_block_efficiency_iid", "predicted_block_efficiency_depth", "block_efficiency_deviation", "c",
            "predicted_speedup_leviathan", "predicted_speedup_cost_curve", "explained_by_cost_curve"}


@pytest.fixture(scope="module")
def tiny_speedup():
    import torch

    tgt = tiny_lm(0, vocab=16, dtype=torch.float32)
    draft = BenchDraft("tiny-draft", "model", tiny_lm(1, vocab=16, dtype=torch.float32))
    return run_speedup_bench(target=tgt, draft=draft, prompts=[[1, 2, 3, 1, 2], [4, 5, 6, 4, 5]], temperatures=[0.0, 1.0],
                             gammas=[2], trees=[(2, 2)], tree_verifiers=["kseq", "greedy"], max_new_tokens=8,
                             cost_reps=1, progress=False)


def test_schema_and_methods(tiny_speedup):
    res = tiny_speedup
    assert res["benchmark"] == "speedup" and res["schema_version"] == 1 and res["draft_available"]
    json.loads(json.dumps(res))
    methods = {r["method"] for r in res["rows"]}
    assert methods == {"ar", "hf-ar", "ngram γ=2", "hf-prompt-lookup γ=2", "spec n=1 γ=2", "hf-assisted γ=2",
                       "tree n=2 γ=2 kseq", "tree n=2 γ=2 greedy"}
    for r in res["rows"]:
        assert ROW_KEYS <= set(r)
        assert r["tokens"] == 2 * 8 or r["tokens"] <= 16  # same budget for every method
        assert r["block_efficiency"] >= 1.0 - 1e-9
        if r["method"] == "ar":
            assert abs(r["speedup"] - 1.0) < 1e-12 and abs(r["block_efficiency"] - 16 / 18) < 0.2
        if r["family"] in ("spec", "tree"):
            assert r["predicted_block_efficiency_iid"] is not None and r["predicted_speedup_cost_curve"] is not None
            assert 0.0 <= r["acceptance"] <= 1.0
    cc = res["cost_curve"]
    assert {"1", "3", "5"} <= set(cc["target_ms"]) and cc["target_ratio"]["1"] == 1.0
    assert res["load_avg_start"] is not None


def test_auto_row_runs_the_default_plan():
    """--extra-drafts auto: one row per temperature, decoded as specot.generate's draft='auto' would
    (on a tiny target: n-gram chains, the same tokens as the ngram row at T = 0)."""
    import torch

    tgt = tiny_lm(0, vocab=16, dtype=torch.float32)
    res = run_speedup_bench(target=tgt, draft=None, prompts=[[1, 2, 3, 1, 2], [4, 5, 6, 4, 5]], temperatures=[0.0, 1.0],
                            gammas=[4], trees=[], tree_verifiers=[], max_new_tokens=8, cost_reps=1, progress=False,
                            peers=False, extra_drafts=["auto"])
    rows = {(r["temperature"], r["method"]): r for r in res["rows"]}
    assert {m for _, m in rows} == {"ar", "ngram γ=4", "auto"}
    assert rows[(0.0, "auto")]["tokens"] == rows[(0.0, "ngram γ=4")]["tokens"]
    assert rows[(0.0, "auto")]["target_calls"] == rows[(0.0, "ngram γ=4")]["target_calls"]


def test_hf_peers_match_at_temperature_zero(tiny_speedup):
    # greedy decoding: every lossless method must emit the same number of tokens (no EOS here)
    toks = {r["method"]: r["tokens"] for r in tiny_speedup["rows"] if r["temperature"] == 0.0}
    assert len(set(toks.values())) == 1, toks


def test_report(tiny_speedup, tmp_path):
    md = speedup_table(tiny_speedup)
    assert md.startswith("| T | method |") and "hf-assisted γ=2" in md
    paths = speedup_plots(tiny_speedup, tmp_path)
    assert all(p.exists() and p.stat().st_size > 1000 for p in paths)
    section = results_markdown(None, {**tiny_speedup, "command": "specot bench speedup --quick"}, plots_dir="docs/bench")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n## Results\n\nRESULTS_PLACEHOLDER\n\n## Next\n")
    update_results(readme, section)
    text = readme.read_text()
    assert START in text and END in text and "RESULTS_PLACEHOLDER" not in text and "## Next" in text
    update_results(readme, "new body\n")  # idempotent replacement between the markers
    text2 = readme.read_text()
    assert "new body" in text2 and "specot bench speedup --quick" not in text2 and text2.count(START) == 1


def test_cli_parses():
    from specot.cli.main import build_parser

    args = build_parser().parse_args(["bench", "speedup", "--quick", "--trees", "2x4,4x4", "--draft", "none"])
    assert args.func.__name__ == "_speedup"
    from specot_lab.cli_bench import _trees

    assert _trees("2x4,4X8") == [(2, 4), (4, 8)]
    with pytest.raises(ValueError):
        _trees("24")


@pytest.mark.slow
@pytest.mark.real_model
def test_cli_quick_real_model(tmp_path, capsys):
    from specot.cli.main import main

    rc = main(["bench", "speedup", "--quick", "--json", "--no-progress", "--draft", "none", "--out", str(tmp_path),
               "--max-new-tokens", "8"])
    assert rc == 0
    res = json.loads(capsys.readouterr().out)
    assert {r["method"] for r in res["rows"]} >= {"ar", "hf-ar", "ngram γ=3", "hf-prompt-lookup γ=3"}
    assert (tmp_path / "speedup.png").exists()
