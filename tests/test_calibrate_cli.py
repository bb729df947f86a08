"""``specot calibrate`` (:mod:`specot.cli.calibrate`) on the transformers backend's tiny model: one
JSON object, the cache on a second call, the table and the plot. No test asserts on a timing."""

from __future__ import annotations

import json
from pathlib import Path

from specot.cli.main import main


def test_specot_calibrate_json_prints_one_object(tiny_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path))
    argv = ["calibrate", "--backend", "transformers", "--target", str(tiny_model_dir), "--widths", "1,2,3",
            "--repeats", "2", "--json"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    obj = json.loads(out)
    assert out.strip().count("\n") == 0
    assert obj["backend"] == "transformers" and obj["source"] == "measured"
    assert obj["curve"]["widths"] == [1, 2, 3] and obj["curve"]["ratios"][0] == 1.0
    assert [r["B"] for r in obj["rows"]] == [1, 2, 3] and Path(obj["cache_file"]).is_file()
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["source"] == "cache"
    plot = tmp_path / "r.png"
    assert main(argv[:-1] + ["--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    assert "break-even" in text and plot.is_file()


def test_the_report_says_what_a_wide_pass_costs_and_how_often_it_drafted():
    """``specot generate`` prints, when a measured curve priced the drafts, what a 2- and a 5-token
    pass cost here, the acceptance one draft token needs to pay, and how many steps drafted."""
    from specot.calibration import PassCostCurve
    from specot.cli.generate_run import pricing_line

    assert pricing_line(None, [0, 3]) == ""
    curve = PassCostCurve((1, 2, 5), (10.0, 15.6, 32.8), source="cache").to_dict()
    line = pricing_line(curve, [0, 4, 0, 0])
    assert "2-token pass costs 1.56" in line and "5-token pass 3.28" in line
    assert ">= 56% of the time" in line and "where the text repeats" in line and "drafted at 1 of 4 steps" in line
    flat = pricing_line(PassCostCurve((1, 2, 5), (10.0, 20.0, 50.0)).to_dict(), [0, 0])
    assert "no draft can pay" in flat and "drafted at 0 of 2 steps" in flat
    cheap = pricing_line(PassCostCurve((1, 2, 5), (10.0, 10.5, 11.0)).to_dict(), [2, 2])
    assert "wherever a draft is likely" in cheap
    # llama.cpp's CPU kernels: a 4-token pass costs what a 3-token one does, so chains of 3 pay first
    paired = PassCostCurve((1, 2, 3, 4, 5), (10.0, 19.2, 24.7, 25.2, 30.7)).to_dict()
    assert "(chains of 3)" in pricing_line(paired, [3, 0])
    # a drafted step's own work is priced beside the pass: it raises the acceptance a draft needs
    costly = pricing_line({**curve, "draft_overhead": 0.2, "step_work": {"values": {}}}, [0, 4])
    assert ", plus 0.20 for a drafted step's own work, measured" in costly
    assert ">= 56% of the time" not in costly and "(chains of 1)" not in costly
