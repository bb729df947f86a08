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
