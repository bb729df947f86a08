"""The converted-model cache of the embedded target (specot.models.embedded, module docstring).

The mechanics run on a stand-in conversion (a tiny saved model copied into the cache); one slow
test checks that the real cached copy loads bit for bit the weights, tokenizer and special tokens
of a load from the GGUF file."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch

import specot
from specot.models import embedded


@pytest.fixture
def fake_gguf(tmp_path, tiny_model_dir, monkeypatch):
    """A GGUF stand-in whose "conversion" copies the tiny saved model; returns (dir, file, calls)."""
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "model.gguf").write_bytes(b"GGUF version one")
    calls: list[str] = []

    def convert(directory, gguf, out):
        calls.append(gguf)
        shutil.copytree(tiny_model_dir, out, dirs_exist_ok=True)

    monkeypatch.setattr(embedded, "_convert_gguf", convert)
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECOT_NO_CACHE", raising=False)
    return src, "model.gguf", calls


def test_the_first_load_converts_and_later_loads_read_the_copy(fake_gguf, tmp_path):
    src, gguf, calls = fake_gguf
    first = embedded._converted_copy(src, gguf)
    assert first is not None and (first / "config.json").is_file() and (first / embedded._CACHE_MARK).is_file()
    assert first.parent == tmp_path / "cache"
    assert embedded._converted_copy(src, gguf) == first
    assert calls == [gguf]  # converted once
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".converting-")]  # no temporary left


def test_new_file_contents_convert_again(fake_gguf):
    src, gguf, calls = fake_gguf
    first = embedded._converted_copy(src, gguf)
    (src / gguf).write_bytes(b"GGUF version two")
    second = embedded._converted_copy(src, gguf)
    assert second != first and len(calls) == 2


def test_an_interrupted_copy_is_made_again(fake_gguf):
    src, gguf, calls = fake_gguf
    first = embedded._converted_copy(src, gguf)
    (first / embedded._CACHE_MARK).unlink()  # as if the process died before writing the mark
    (first / "model.safetensors").write_bytes(b"truncated")
    again = embedded._converted_copy(src, gguf)
    assert again == first and len(calls) == 2 and (again / embedded._CACHE_MARK).is_file()
    assert (again / "model.safetensors").read_bytes() != b"truncated"


def test_no_cache_when_switched_off(fake_gguf, monkeypatch):
    src, gguf, calls = fake_gguf
    monkeypatch.setenv("SPECOT_NO_CACHE", "1")
    assert embedded.model_cache_dir() is None
    assert embedded._converted_copy(src, gguf) is None and calls == []


def test_an_unwritable_cache_warns_once_and_falls_back(fake_gguf, tmp_path, monkeypatch):
    src, gguf, calls = fake_gguf
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(blocker / "cache"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert embedded._converted_copy(src, gguf) is None
    msgs = [str(w.message) for w in seen]
    assert len(msgs) == 1 and "SPECOT_CACHE_DIR" in msgs[0] and str(blocker) in msgs[0]


def test_cache_location_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECOT_NO_CACHE", raising=False)
    monkeypatch.delenv("SPECOT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert embedded.model_cache_dir() == tmp_path / "xdg" / "specot"
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path / "mine"))
    assert embedded.model_cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("SPECOT_NO_CACHE", "0")  # "0" leaves it on
    assert embedded.model_cache_dir() == tmp_path / "mine"


@pytest.mark.slow
@pytest.mark.real_model
def test_the_cached_copy_loads_the_gguf_model_bit_for_bit(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPECOT_NO_CACHE", "1")
    direct = specot.load_embedded_target(dtype="float32")  # from the GGUF file
    monkeypatch.delenv("SPECOT_NO_CACHE")
    cached32 = specot.load_embedded_target(dtype="float32")  # makes the copy
    cached = specot.load_embedded_target(dtype="bfloat16")  # reads it
    assert len(list((tmp_path / "cache").iterdir())) == 1
    a, b, b16 = direct.model.state_dict(), cached32.model.state_dict(), cached.model.state_dict()
    assert a.keys() == b.keys() == b16.keys()
    assert all(b[k].dtype == torch.float32 and torch.equal(a[k], b[k]) for k in a)  # the de-quantized values
    assert all(b16[k].dtype == torch.bfloat16 and torch.equal(a[k].to(torch.bfloat16), b16[k]) for k in a)
    assert cached.model.lm_head.weight.data_ptr() == cached.model.model.embed_tokens.weight.data_ptr()  # still tied
    assert (cached.name, cached.vocab_size, cached.max_context, cached.eos_token_ids) == \
        (direct.name, direct.vocab_size, direct.max_context, direct.eos_token_ids)
    assert specot.models.embedded.is_embedded_target(cached)
    texts = ["def f(x):\n    return x ** 2  # ünïcödé 你好", "  two  spaces\t\ttabs\n\n", "<|im_start|>user\nhi<|im_end|>"]
    for text in texts:
        assert cached.tokenizer(text)["input_ids"] == direct.tokenizer(text)["input_ids"], text
    assert cached.encode_prompt("What is 2 + 2?") == direct.encode_prompt("What is 2 + 2?")  # the chat template
