"""The cached tokenizer of a GGUF file (specot_llamacpp.loading.gguf_tokenizer, module docstring).

A stand-in GGUF file whose "tokenizer read" loads the tiny saved model's word-level tokenizer (the
real read parses the GGUF for tens of seconds); the cache mechanics are the real ones."""

from __future__ import annotations

import shutil
import warnings

import pytest
from transformers import AutoTokenizer

from specot.models import cache_integrity
from specot_llamacpp import loading


@pytest.fixture
def fake_gguf(tmp_path, tiny_model_dir, monkeypatch):
    """``(gguf path, cache root, reads)``: ``reads`` lists every read of the tokenizer from the file."""
    src = tmp_path / "pkg"
    src.mkdir()
    gguf = src / "model.gguf"
    gguf.write_bytes(b"GGUF stand-in")
    reads: list[str] = []

    def read(path):
        reads.append(path.name)
        return AutoTokenizer.from_pretrained(tiny_model_dir)

    monkeypatch.setattr(loading, "_read_tokenizer", read)
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECOT_NO_CACHE", raising=False)
    return gguf, tmp_path / "cache", reads


def _tokenizer(gguf):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tok = loading.gguf_tokenizer(gguf)
    return tok, [str(w.message) for w in seen]


def _dirs(cache, kind: str):
    return [p for p in cache.iterdir() if p.is_dir() and f"-{kind}-" in p.name and not p.name.startswith(".")]


def _works(tok) -> bool:
    return tok("the cat sat")["input_ids"] == [1, 3, 5]  # the tiny word-level vocabulary


def test_the_tokenizer_is_read_once_then_from_the_cache(fake_gguf):
    gguf, cache, reads = fake_gguf
    tok, msgs = _tokenizer(gguf)
    (mine,) = _dirs(cache, "tokenizer")
    files = cache_integrity.read_marker(mine, loading._MARK)["files"]
    assert files["tokenizer.json"]["sha256"] == cache_integrity.file_sha256(mine / "tokenizer.json")
    again, more = _tokenizer(gguf)
    assert _works(tok) and _works(again) and msgs == more == [] and reads == ["model.gguf"]
    assert not [p for p in cache.iterdir() if p.name.startswith(cache_integrity.TMP_PREFIX)]


@pytest.mark.parametrize("damage", ["empty", "same size"])
def test_a_damaged_cached_tokenizer_is_made_again_with_one_warning(fake_gguf, damage):
    gguf, cache, reads = fake_gguf
    _tokenizer(gguf)
    (mine,) = _dirs(cache, "tokenizer")
    path = mine / "tokenizer.json"
    path.write_bytes(b"" if damage == "empty" else b" " * path.stat().st_size)
    tok, msgs = _tokenizer(gguf)
    assert len(msgs) == 1 and f"the cached tokenizer in {mine} cannot be used (tokenizer.json " in msgs[0], msgs
    assert "read it again from model.gguf" in msgs[0]
    assert _works(tok) and reads == ["model.gguf"] * 2
    again, more = _tokenizer(gguf)
    assert _works(again) and more == [] and len(reads) == 2  # repaired for good


def test_an_older_marker_without_checksums_is_made_again_when_it_fails_to_load(fake_gguf):
    gguf, cache, reads = fake_gguf
    _tokenizer(gguf)
    (mine,) = _dirs(cache, "tokenizer")
    (mine / loading._MARK).write_text('{"gguf": "model.gguf"}')
    (mine / "tokenizer.json").write_bytes(b"")
    tok, msgs = _tokenizer(gguf)
    assert len(msgs) == 1 and f"{mine} cannot be used (it fails to load: JSONDecodeError: " in msgs[0], msgs
    assert _works(tok) and len(reads) == 2 and "files" in cache_integrity.read_marker(mine, loading._MARK)


def _converted_copy(cache, gguf, tiny_model_dir):
    """A transformers-backend copy of the stand-in file, as specot.models.embedded names and marks it."""
    digest = cache_integrity.file_sha256(gguf)[:16]
    cache.mkdir(parents=True, exist_ok=True)
    dest = cache / f"{gguf.stem}-{digest}-transformers-{loading.transformers.__version__}"
    with cache_integrity.build_into(dest, loading._CONVERTED_MARK, {"gguf": gguf.name}) as tmp:
        shutil.copytree(tiny_model_dir, tmp, dirs_exist_ok=True)
    return dest


def test_the_converted_copys_tokenizer_is_used_and_a_damaged_one_falls_back(fake_gguf, tiny_model_dir):
    gguf, cache, reads = fake_gguf
    converted = _converted_copy(cache, gguf, tiny_model_dir)
    tok, msgs = _tokenizer(gguf)
    assert _works(tok) and msgs == [] and reads == [] and _dirs(cache, "tokenizer") == []
    (converted / "tokenizer.json").write_bytes(b"")
    tok, msgs = _tokenizer(gguf)
    assert len(msgs) == 1 and f"the cached tokenizer in {converted} cannot be used (tokenizer.json has 0 " in msgs[0]
    assert _works(tok) and reads == ["model.gguf"] and len(_dirs(cache, "tokenizer")) == 1
    again, more = _tokenizer(gguf)
    assert _works(again) and more == [] and len(reads) == 1  # its own cached copy from now on


def test_an_unwritable_cache_reads_the_file_with_one_warning(fake_gguf, tmp_path, monkeypatch):
    gguf, cache, reads = fake_gguf
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(blocker / "cache"))
    tok, msgs = _tokenizer(gguf)
    assert _works(tok) and len(msgs) == 1 and "SPECOT_CACHE_DIR" in msgs[0] and reads == ["model.gguf"]
