"""A damaged model directory (--target, --draft, the shipped distilled draft) gets one line that
names the damaged file and the fix, exit 1, never a traceback: safetensors raises its own
``SafetensorError`` (not an ``OSError``) and torch a ``RuntimeError``, which the loader reports as
one ``OSError`` (specot.models.loading.load_model, damaged_file)."""

from __future__ import annotations

import shutil

import pytest

from specot.cli.main import main as cli_main
from specot.models import embedded, loading

pytestmark = pytest.mark.filterwarnings("ignore")


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("specot: error: ") and "Traceback" not in err, err
    return lines[0]


def _gen(target, draft="ngram") -> list[str]:
    return ["generate", "--prompt", "the cat", "--target", str(target), "--draft", str(draft), "--ngram-corpus",
            "none", "--raw", "--dtype", "float32", "--max-new-tokens", "4"]


@pytest.mark.parametrize("size,why", [(0, "truncated: 0 bytes, too short for a header"),
                                      (100, "truncated: 100 bytes, the header alone needs"),
                                      (20000, "truncated: 20000 of ")])
def test_a_truncated_target_gets_one_line_naming_the_file(tiny_model_dir, tmp_path, capsys, size, why):
    d = _copy(tiny_model_dir, tmp_path / "target")
    _truncate(d / "model.safetensors", size)
    assert cli_main(_gen(d)) == 1
    line = _one_error_line(capsys)
    assert f"cannot load the model in {str(d)!r}: model.safetensors is damaged ({why}" in line
    assert "copy the model directory again or re-save it with save_pretrained" in line


def test_a_truncated_draft_gets_one_line_naming_the_file(tiny_model_dir, tmp_path, capsys):
    d = _copy(tiny_model_dir, tmp_path / "draft")
    _truncate(d / "model.safetensors", 20000)
    assert cli_main(_gen(tiny_model_dir, draft=d)) == 1
    assert f"{str(d)!r}: model.safetensors is damaged (truncated: 20000 of " in _one_error_line(capsys)


def test_a_garbled_header_and_a_broken_tokenizer_file(tiny_model_dir, tmp_path, capsys):
    d = _copy(tiny_model_dir, tmp_path / "garbled")
    with open(d / "model.safetensors", "r+b") as f:
        f.write(bytes(8))  # a header length of 0: the JSON header is empty
    assert cli_main(_gen(d)) == 1
    assert "model.safetensors is damaged (its header is not valid JSON)" in _one_error_line(capsys)
    t = _copy(tiny_model_dir, tmp_path / "tok")
    _truncate(t / "tokenizer.json", 100)
    assert cli_main(_gen(t)) == 1
    assert "tokenizer.json is damaged (not valid JSON: " in _one_error_line(capsys)


def test_a_torch_checkpoint_and_a_missing_shard(tiny_model_dir, tmp_path):
    d = _copy(tiny_model_dir, tmp_path / "bin")
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(bytes(30000))  # neither a zip archive nor a pickle
    with pytest.raises(OSError, match=r"pytorch_model\.bin is damaged \(not a complete torch archive\)"):
        loading.load_model(d, dtype="float32")
    s = _copy(tiny_model_dir, tmp_path / "sharded")
    (s / "model.safetensors").rename(s / "model-00001-of-00002.safetensors")
    (s / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}')
    assert loading.damaged_file(s) == "model-00002-of-00002.safetensors is missing (named by " \
                                      "model.safetensors.index.json)"
    assert loading.damaged_file(tiny_model_dir) is None


@pytest.mark.parametrize("with_tokenizer", [False, True])
def test_a_damaged_shipped_draft_says_to_reinstall(tiny_model_dir, tmp_path, monkeypatch, with_tokenizer):
    d = _copy(tiny_model_dir, tmp_path / "draft")
    _truncate(d / "model.safetensors", 20000)
    monkeypatch.setattr(embedded, "embedded_draft_dir", lambda: d)
    tokenizer = object() if with_tokenizer else None  # the second branch attaches the target's tokenizer
    with pytest.raises(OSError) as info:
        embedded.load_embedded_draft(dtype="float32", tokenizer=tokenizer)
    msg = str(info.value)
    assert "\n" not in msg and "model.safetensors is damaged (truncated: 20000 of " in msg
    assert msg.endswith("the shipped draft is damaged: reinstall specot, or use --draft ngram")


def test_a_load_failure_without_a_damaged_file_keeps_its_type_and_first_line(tiny_model_dir, monkeypatch):
    def out_of_memory(*a, **k):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory\nmore detail")

    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", out_of_memory)
    with pytest.raises(OSError, match=r"^cannot load the model in .*: RuntimeError: DefaultCPUAllocator: "
                                      r"can't allocate memory$"):
        loading.load_model(tiny_model_dir, dtype="float32")
