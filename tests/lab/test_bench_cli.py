"""``specot bench``: one CLI style. The speed benchmarks are sub-commands (``add_arguments`` /
``run``, no ``main``), listed by ``specot bench --help``; their runs go through the CLI (with the
measurements stubbed: these tests check the wiring, not the timings)."""

from __future__ import annotations

import json

import pytest

from specot.cli.main import build_parser, main
from specot_lab.bench import generate_speed, head_speed, theory_speed, tree_speed, verifier_speed

SPEED = {"theory-speed": theory_speed, "verifier-speed": verifier_speed, "head-speed": head_speed,
         "generate-speed": generate_speed, "tree-speed": tree_speed}


def test_bench_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ("acceptance", "speedup", "results", *SPEED):
        assert f"\n    {name} " in out or f"\n    {name}\n" in out, name


@pytest.mark.parametrize("name", sorted(SPEED))
def test_speed_benches_are_subcommands(name):
    mod = SPEED[name]
    assert not hasattr(mod, "main")
    args = build_parser().parse_args(["bench", name])
    assert args.func is mod.run


def test_head_speed_runs_through_the_cli(tmp_path, capsys):
    out = tmp_path / "head.json"
    rc = main(["bench", "head-speed", "--vocab", "32", "--hidden", "8", "--rows", "1,2", "--reps", "1",
               "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == res
    assert (res["V"], res["d"]) == (32, 8)
    assert [(r["dtype"], r["M"]) for r in res["rows"]] == [("float32", 1), ("float32", 2), ("bfloat16", 1),
                                                          ("bfloat16", 2)]


def test_theory_speed_runs_through_the_cli(tmp_path, monkeypatch, capsys):
    calls = []

    def fake(**kw):
        calls.append(kw)
        return {"V": kw["V"], "reps": kw["reps"], "load_average": None,
                "rows": [{"law": "iid", "n": 2, "temperature": 1.0, "median_ms": 1.0, "max_ms": 2.0}]}

    monkeypatch.setattr(theory_speed, "measure", fake)
    out = tmp_path / "theory.json"
    assert main(["bench", "theory-speed", "--quick", "--out", str(out)]) == 0
    assert calls == [{"V": 4096, "temperatures": (1.0,), "reps": 3}]
    assert "worst median: 1.0 ms -> OK" in capsys.readouterr().out
    assert "environment" in json.loads(out.read_text())


def test_verifier_speed_runs_through_the_cli(tmp_path, monkeypatch, capsys):
    row = {"verifier": "kseq", "law": "iid", "B": 1, "n": 2, "ms_per_call": 1.0, "ms_per_position": 1.0, "repeats": 5}
    monkeypatch.setattr(verifier_speed, "measure", lambda quick, only=None: [row] if quick and only is None else [])
    out = tmp_path / "speed.json"
    assert main(["bench", "verifier-speed", "--quick", "--out", str(out)]) == 0
    assert "kseq" in capsys.readouterr().out
    res = json.loads(out.read_text())
    assert res["results"] == [row] and res["meta"]["threads"] == 1


def test_generate_speed_runs_through_the_cli(tmp_path, monkeypatch, capsys):
    seen = {}

    def fake(**kw):
        seen.update(kw)
        return {"rows": [{"temperature": 0.0, "gamma": 3, "block_efficiency": 2.0, "acceptance_rate": 0.5,
                          "spec_tokens_per_s": 20.0, "ar_tokens_per_s": 10.0, "speedup": 2.0}]}

    monkeypatch.setattr(generate_speed, "run_generate_bench", fake)
    monkeypatch.setattr(generate_speed, "load_prompts", lambda spec, n: [f"{spec} {i}" for i in range(n)])
    out = tmp_path / "gen.json"
    assert main(["bench", "generate-speed", "--quick", "--gammas", "3", "--temperatures", "0",
                 "--ngram-corpus", "none", "--out", str(out)]) == 0
    assert seen["prompts"] == ["pydoc 0", "pydoc 1"] and seen["gammas"] == [3] and seen["max_new_tokens"] == 16
    assert seen["ngram_corpus"] is None
    assert "| 0 | 3 | 2.00 |" in capsys.readouterr().out
    res = json.loads(out.read_text())
    assert res["command"] == (f"specot bench generate-speed --ngram-corpus none --gammas 3 --temperatures 0 "
                              f"--quick --out {out}")


def test_tree_speed_runs_through_the_cli(tmp_path, monkeypatch):
    seen = {}

    def fake_grid(Ks, Ls, laws, n_prompts, max_new_tokens, seed=0, progress=True):
        seen.update(Ks=Ks, Ls=Ls, n_prompts=n_prompts, max_new_tokens=max_new_tokens, progress=progress)
        return [{"K": 1}]

    monkeypatch.setattr(tree_speed, "measure_grid", fake_grid)
    out = tmp_path / "tree.json"
    assert main(["bench", "tree-speed", "--quick", "--sections", "grid", "--no-progress", "--out", str(out)]) == 0
    assert seen == {"Ks": [1, 2, 4, 8], "Ls": [2, 4, 8], "n_prompts": 2, "max_new_tokens": 32, "progress": False}
    res = json.loads(out.read_text())
    assert res["grid"] == [{"K": 1}] and res["quick"] is True and "tree_cost" not in res


@pytest.mark.parametrize("bench,extra,match", [
    ("speedup", ["--n-prompts", "0"], "n_prompts (--n-prompts) must be an integer >= 1, got 0"),
    ("acceptance", ["--n-prompts", "-2"], "n_prompts (--n-prompts) must be an integer >= 1, got -2"),
    ("speedup", ["--max-new-tokens", "0"], "max_new_tokens (--max-new-tokens) must be an integer >= 1"),
    ("speedup", ["--threads", "-1"], "threads (--threads) must be an integer >= 0"),
    ("speedup", ["--trees", "0x4"], "--trees takes NxG pairs"),
    ("speedup", ["--trees", "2x"], "--trees takes NxG pairs"),
    ("speedup", ["--gammas", "x"], "--gammas takes comma-separated integers like 2,4; got 'x'"),
    ("speedup", ["--temperatures", "0,warm"], "--temperatures takes comma-separated numbers"),
    ("acceptance", ["--ns", "1,two"], "--ns takes comma-separated integers"),
    ("acceptance", ["--mc-samples", "0"], "mc_samples (--mc-samples) must be an integer >= 1"),
])
def test_bad_counts_one_line_before_any_run(monkeypatch, capsys, bench, extra, match):
    # these once crashed with a traceback (--n-prompts 0) or were silently replaced by the default
    # (--max-new-tokens 0, --threads -1, --trees 0x4)
    import specot_lab.cli_bench as cb

    def boom(**kw):
        raise AssertionError("the benchmark ran despite a bad option")
    monkeypatch.setattr(cb, "run_speedup_bench", boom)
    monkeypatch.setattr(cb, "run_acceptance_bench", boom)
    assert main(["bench", bench, "--prompts", "zen", "--no-progress", *extra]) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("specot: error: ") and match in err[0], err


def test_load_prompts_refuses_fewer_than_one():
    from specot_lab.corpus import load_prompts

    assert len(load_prompts("zen", 1)) == 1
    for n in (0, -1, True):
        with pytest.raises(ValueError, match="number of prompts must be an integer >= 1"):
            load_prompts("zen", n)
