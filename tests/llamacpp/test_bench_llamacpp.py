"""``specot bench llamacpp run`` on one tiny cell: every method's time inside llama_decode
is counted (llama-cpp-python's calls and specot's), and llama_decode is itself again afterwards."""

from __future__ import annotations

import json

import llama_cpp
import llama_cpp.llama_cpp as low

from specot_lab.bench import llamacpp as bench


def test_run_records_each_loops_time_outside_llama_decode(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Name three colours."}) + "\n", encoding="utf-8")
    out = tmp_path / "r.json"
    before = low.llama_decode
    assert bench.main(["run", "--prompts", str(prompts), "--n-prompts", "1", "--max-new-tokens", "6",
                       "--temperatures", "0", "--methods", "plain", "specot-ar", "--cost-repeats", "1",
                       "--no-progress", "--out", str(out)]) == 0
    assert low.llama_decode is before and llama_cpp.llama_decode is before
    rows = json.loads(out.read_text())["results"]["p"]["0.0"]
    for m in ("plain", "specot-ar"):
        r = rows[m]
        assert 0 < r["llama_decode_s"] < r["time_s"]  # both loops' passes were seen
        recomputed = 1e3 * (r["time_s"] - r["llama_decode_s"]) / r["tokens"]  # from fields rounded to 1 ms
        assert r["outside_decode_ms_per_token"] >= 0
        assert abs(r["outside_decode_ms_per_token"] - recomputed) <= 1.0 / r["tokens"]


def test_a_plan_method_runs_specots_plan_for_a_draft_name_and_greedy_matches_plain(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Repeat: one two three one two three"}) + "\n", encoding="utf-8")
    out = tmp_path / "r.json"
    assert bench.main(["run", "--prompts", str(prompts), "--n-prompts", "1", "--max-new-tokens", "8",
                       "--temperatures", "0", "--methods", "specot-ar", "specot:none", "specot:suffix",
                       "specot:auto;suffix_copy_anchor=false", "--cost-repeats", "1", "--no-progress", "--target", "smollm2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["benchmark"] == "llamacpp"
    rows = res["results"]["p"]["0.0"]
    assert rows["specot:none"]["tokens"] == rows["specot-ar"]["tokens"] == rows["specot:suffix"]["tokens"] == \
        rows["specot:auto;suffix_copy_anchor=false"]["tokens"]
    # a file the benchmark did not write is never replaced unasked
    other = tmp_path / "mine.json"
    other.write_text("{}", encoding="utf-8")
    assert bench.main(["run", "--prompts", str(prompts), "--methods", "specot:none", "--out", str(other)]) == 2
    assert other.read_text() == "{}"


def test_a_plan_methods_options_are_parsed_and_override_autos_table():
    assert bench._draft_and_options("auto;suffix_copy_anchor=false;suffix_min_match=3;ngram_corpus=none") == \
        ("auto", {"suffix_copy_anchor": False, "suffix_min_match": 3, "ngram_corpus": "none"})
    assert bench._draft_and_options("xvocab:a.gguf") == ("xvocab:a.gguf", {})


def test_a_method_that_is_neither_listed_nor_a_plan_is_refused(capsys):
    import pytest

    with pytest.raises(SystemExit):
        bench.main(["run", "--prompts", "p.jsonl", "--methods", "specot-fast"])
    assert "specot:DRAFT" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["run", "--prompts", "p.jsonl", "--methods", "specot:auto;suffix_copy_anchor"])
    assert "KEY=VALUE" in capsys.readouterr().err


def test_the_speedup_model_counts_the_draft_models_passes_and_sets_its_step_beside_the_measured_one():
    from specot.calibration import PassCostCurve

    curve = PassCostCurve((1, 2, 3), (100.0, 150.0, 180.0))  # r = 1, 1.5, 1.8
    # two runs, four passes: chains of 2, 1, 0 and 2 draft nodes; each draft pass costs 0.1 target passes
    cell = {"tree_sizes": [2, 1, 0, 2], "emitted": [3, 2, 1, 2], "passes": 4, "runs": 2, "draft_calls": 6,
            "draft_passes_cost": 0.6, "firsts": 2, "time_s": 1.0, "ttft_s": 0.5}
    row = bench._step_model(cell, curve)
    units = 1.8 + 1.5 + 1.0 + 1.8 + 0.6
    assert row["predicted_speedup_vs_ar"] == round(8 / units, 3)
    assert row["predicted_speedup_vs_ar"] < round(8 / (units - 0.6), 3)  # the draft passes are paid for
    assert row["predicted_step_ms"] == round(100.0 * units / 4, 2)
    assert row["measured_step_ms"] == 250.0  # 0.5 s after the first tokens over 2 later passes
    assert row["step_vs_predicted"] == round(250.0 / (100.0 * units / 4), 3)


def test_auto_table_and_auto_plus_a_draft_are_the_plans_auto_would_run(target):
    """``specot:auto-table`` is the backend's table alone; ``specot:auto+DRAFT`` the table with the draft
    model added as ``auto`` adds one (its suffix options kept), at every temperature."""
    from specot.models.embedded import embedded_gguf
    from specot_llamacpp.auto import AUTO_TABLE

    directory, name = embedded_gguf()
    gguf = str(directory / name)
    table = bench._make_plan("auto-table", {}, target, 1.0)
    assert table.draft.name == "suffix" and table.tree.children == AUTO_TABLE.at(1.0).children
    both = bench._make_plan(f"auto+{gguf}", {}, target, 1.0)
    assert both.draft.name == f"suffix+{gguf}" and both.gamma == AUTO_TABLE.at(1.0).gamma
    assert both.draft.option("suffix_copy_anchor") is True and both.draft.option("suffix_min_match") == 4
    window = bench._make_plan(f"auto+xvocab-slem:{gguf}", {"draft_window": 64}, target, 0.0)
    assert window.draft.inner.option("draft_window") == 64
