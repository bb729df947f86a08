"""The vLLM benchmark's prompt files (no engine: nothing here is timed)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("specot_vllm")

from specot_vllm.bench import load_prompts  # noqa: E402


def _write(path, prompts):
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts), encoding="utf-8")
    return str(path)


def test_prompts_are_taken_from_each_file_in_turn(tmp_path):
    a = _write(tmp_path / "a.jsonl", ["a1", "a2", "a3"])
    b = _write(tmp_path / "b.jsonl", ["b1"])
    assert load_prompts([a, b]) == ["a1", "b1", "a2", "a3"]


@pytest.mark.parametrize("text", ["not json\n", '{"text": "x"}\n', "", '["x"]\n', '{"prompt": 3}\n'])
def test_a_bad_prompt_file_is_one_clear_error(tmp_path, text):
    path = tmp_path / "bad.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="--prompts"):
        load_prompts([str(path)])
