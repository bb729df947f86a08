"""The converted-model cache of the embedded target (specot.models.embedded, module docstring).

The mechanics run on a stand-in conversion (a tiny saved model copied into the cache); one slow
test checks that the real cached copy loads bit for bit the weights, tokenizer and special tokens
of a load from the GGUF file."""

from __future__ import annotations

import errno
import json
import os
import struct
import time
import signal
import subprocess
import sys
import shutil
import threading
import warnings
from pathlib import Path

import pytest
import torch

import specot
from specot.models import cache_integrity, embedded


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
    with pytest.warns(UserWarning, match="cannot be used .*made it again"):  # one warning, and it says why
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
    cached32_dir = embedded._converted_copy(*embedded.embedded_gguf())
    cached = specot.load_embedded_target(dtype="bfloat16")  # reads it
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == [cached32_dir.name]
    files = cache_integrity.read_marker(cached32_dir, embedded._CACHE_MARK)["files"]  # what was written
    assert files["model.safetensors"]["size"] == (cached32_dir / "model.safetensors").stat().st_size
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


# --------------------------------------------------------------------------- integrity, full disk, locking
@pytest.fixture
def fake_embedded(fake_gguf, monkeypatch):
    """load_embedded_target over the GGUF stand-in: the cached copy loads for real; a load from the
    "GGUF file" itself returns the string "gguf" (the stand-in holds no model)."""
    src, gguf, calls = fake_gguf
    monkeypatch.setattr(embedded, "embedded_gguf", lambda: (src, gguf))
    load = embedded.load_model

    def load_model(path, **kw):
        return "gguf" if kw.get("gguf_file") else load(path, **kw)

    monkeypatch.setattr(embedded, "load_model", load_model)
    return src, gguf, calls


def _load_warnings(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in seen]


def _leftovers(cache) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if p.name.startswith(cache_integrity.TMP_PREFIX))


def test_the_marker_records_sizes_and_checksums(fake_gguf):
    src, gguf, _ = fake_gguf
    dest = embedded._converted_copy(src, gguf)
    files = cache_integrity.read_marker(dest, embedded._CACHE_MARK)["files"]
    assert set(files) == {p.name for p in dest.iterdir()} - {embedded._CACHE_MARK}
    rec = files["model.safetensors"]
    assert rec["size"] == (dest / "model.safetensors").stat().st_size
    assert rec["sha256"] == cache_integrity.file_sha256(dest / "model.safetensors")


def test_a_truncated_cached_copy_is_made_again_with_one_warning(fake_embedded, tmp_path):
    src, gguf, calls = fake_embedded
    first = embedded.load_embedded_target(dtype="float32")
    dest = embedded._converted_copy(src, gguf)
    weights = dest / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(size // 2)  # a crash mid-write, a disk error
    again, msgs = _load_warnings(lambda: embedded.load_embedded_target(dtype="float32"))
    assert len(msgs) == 1 and "cannot be used (model.safetensors has " in msgs[0] and "again" in msgs[0]
    assert len(calls) == 2 and weights.stat().st_size == size
    assert torch.equal(again.model.lm_head.weight, first.model.lm_head.weight)
    assert _leftovers(tmp_path / "cache") == []
    assert _load_warnings(lambda: embedded.load_embedded_target(dtype="float32"))[1] == []  # repaired for good


def test_a_corrupted_copy_of_the_right_size_is_caught_by_its_checksum(fake_embedded):
    src, gguf, calls = fake_embedded
    dest = embedded._converted_copy(src, gguf)
    with open(dest / "model.safetensors", "r+b") as f:
        f.write(b"\0" * 16)  # the header length and the start of the header: a load fails
    model, msgs = _load_warnings(lambda: embedded.load_embedded_target(dtype="float32"))
    assert len(msgs) == 1 and "model.safetensors does not match its checksum" in msgs[0]
    assert model != "gguf" and len(calls) == 2


@pytest.fixture
def checked_by_stat(monkeypatch):
    """Every file is checked as the 540 MB weights are: hashed only when its ``stat`` differs from the
    record or the record is recent (here under 50 ms after the file's ``ctime``, not 2 s)."""
    monkeypatch.setattr(cache_integrity, "ALWAYS_HASH_BYTES", 0)
    monkeypatch.setattr(cache_integrity, "RACY_NS", 50_000_000)


def _count_hashes(monkeypatch) -> list[str]:
    """The names of the cached files hashed from now on."""
    hashed: list[str] = []
    real = cache_integrity.file_sha256

    def counting(path):
        hashed.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(cache_integrity, "file_sha256", counting)
    return hashed


def _overwrite_tensor(weights, name: str, garbage: str) -> None:
    """Overwrite the data of tensor ``name`` in a ``.safetensors`` file in place, keeping its size
    and header: plausible float32 noise, or random bytes."""
    with open(weights, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        start, end = json.loads(f.read(n))[name]["data_offsets"]
        data = (torch.randn((end - start) // 4) * 0.05).numpy().tobytes() if garbage == "noise" \
            else os.urandom(end - start)
        f.seek(8 + n + start)
        f.write(data)


@pytest.mark.parametrize("garbage", ["noise", "random"])
@pytest.mark.parametrize("stat_checked", [False, True], ids=["hashed", "stat_checked"])
def test_a_same_size_overwrite_of_the_cached_weights_is_caught_at_the_next_load(
        fake_embedded, tiny_model_dir, monkeypatch, garbage, stat_checked):
    src, gguf, calls = fake_embedded
    if stat_checked:  # as for the real weights, above ALWAYS_HASH_BYTES
        monkeypatch.setattr(cache_integrity, "ALWAYS_HASH_BYTES", 0)
        monkeypatch.setattr(cache_integrity, "RACY_NS", 50_000_000)
    dest = embedded._converted_copy(src, gguf)
    time.sleep(0.1)
    embedded.load_embedded_target(dtype="float32")  # hashes the new copy once, records its stat
    weights = dest / "model.safetensors"
    before = weights.stat()
    _overwrite_tensor(weights, "model.embed_tokens.weight", garbage)
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))  # even with its mtime set back
    assert weights.stat().st_size == before.st_size
    model, msgs = _load_warnings(lambda: embedded.load_embedded_target(dtype="float32"))
    assert len(msgs) == 1, msgs
    assert f"the cached SmolLM2-135M-Instruct in {dest} cannot be used (model.safetensors does not match its " \
           "checksum); made it again from the GGUF file" in msgs[0]
    assert len(calls) == 2 and model != "gguf"
    expected = specot.models.load_model(tiny_model_dir, dtype="float32").model.state_dict()
    got = model.model.state_dict()
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in expected)
    assert _load_warnings(lambda: embedded.load_embedded_target(dtype="float32"))[1] == []  # repaired for good


def test_an_intact_copy_is_not_hashed_once_its_stat_is_recorded(fake_embedded, checked_by_stat, monkeypatch):
    src, gguf, calls = fake_embedded
    dest = embedded._converted_copy(src, gguf)
    hashed = _count_hashes(monkeypatch)
    time.sleep(0.1)
    assert embedded._converted_copy(src, gguf) == dest  # a recent record: hashed in full, stat recorded
    assert "model.safetensors" in hashed
    recorded = cache_integrity.read_marker(dest, embedded._CACHE_MARK)["files"]["model.safetensors"]["stat"]
    assert recorded["checked_ns"] > recorded["ctime_ns"] + cache_integrity.RACY_NS
    hashed.clear()
    model, msgs = _load_warnings(lambda: embedded.load_embedded_target(dtype="float32"))
    assert hashed == [] and msgs == [] and model != "gguf" and len(calls) == 1  # the stat vouches for it


def test_a_copied_cache_is_hashed_once_and_then_trusted(fake_embedded, checked_by_stat, tmp_path, monkeypatch):
    src, gguf, calls = fake_embedded
    dest = embedded._converted_copy(src, gguf)
    time.sleep(0.1)
    embedded._converted_copy(src, gguf)  # records a trusted stat
    moved = tmp_path / "moved"
    shutil.copytree(dest, moved)  # new inodes and times: a backup restored, a cache moved
    shutil.rmtree(dest)
    shutil.copytree(moved, dest)
    time.sleep(0.1)
    hashed = _count_hashes(monkeypatch)
    _, msgs = _load_warnings(lambda: embedded._converted_copy(src, gguf))
    assert msgs == [] and "model.safetensors" in hashed and len(calls) == 1  # the same contents: kept
    hashed.clear()
    assert embedded._converted_copy(src, gguf) == dest and hashed == []


def test_an_older_marker_without_sizes_is_made_again_when_it_fails_to_load(fake_embedded):
    src, gguf, calls = fake_embedded
    dest = embedded._converted_copy(src, gguf)
    (dest / embedded._CACHE_MARK).write_text('{"gguf": "model.gguf"}')
    with open(dest / "model.safetensors", "r+b") as f:
        f.truncate(100)
    model, msgs = _load_warnings(lambda: embedded.load_embedded_target(dtype="float32"))
    assert len(msgs) == 1 and "cannot be used (model.safetensors is damaged (truncated: 100 bytes" in msgs[0]
    assert model != "gguf" and len(calls) == 2
    assert "files" in cache_integrity.read_marker(dest, embedded._CACHE_MARK)


def test_a_load_failure_that_is_not_the_caches_is_raised_as_it_is(fake_embedded, monkeypatch):
    src, gguf, calls = fake_embedded
    embedded._converted_copy(src, gguf)

    def refuse(path, **kw):
        raise OSError("cannot load the model: out of file handles")

    monkeypatch.setattr(embedded, "load_model", refuse)
    with pytest.raises(OSError, match="out of file handles"):
        embedded.load_embedded_target(dtype="float32")
    assert len(calls) == 1  # intact checksums: nothing converted again


def _disk_full(kind):
    if kind == "safetensors":
        from safetensors import SafetensorError
        return SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    return OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("kind", ["safetensors", "oserror"])
def test_a_full_disk_falls_back_to_the_gguf_file_with_one_warning_and_no_partial_directory(
        fake_embedded, tmp_path, monkeypatch, kind):
    src, gguf, _ = fake_embedded

    def convert_until_full(directory, gguf_name, out):
        (out / "model.safetensors").write_bytes(b"\0" * 1000)  # part of the weights written
        raise _disk_full(kind)

    monkeypatch.setattr(embedded, "_convert_gguf", convert_until_full)
    model, msgs = _load_warnings(lambda: embedded.load_embedded_target(dtype="float32"))
    assert model == "gguf"
    assert len(msgs) == 1 and "No space left on device" in msgs[0] and "SPECOT_CACHE_DIR" in msgs[0]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [cache_integrity.LOCK_NAME]  # nothing partial


def test_a_damaged_copy_that_cannot_be_made_again_warns_once(fake_embedded, tmp_path, monkeypatch):
    src, gguf, _ = fake_embedded
    dest = embedded._converted_copy(src, gguf)
    (dest / "tokenizer.json").write_text("{")

    def full(directory, gguf_name, out):
        raise _disk_full("safetensors")

    monkeypatch.setattr(embedded, "_convert_gguf", full)
    model, msgs = _load_warnings(lambda: embedded.load_embedded_target(dtype="float32"))
    assert model == "gguf" and len(msgs) == 1
    assert "cannot be used (tokenizer.json has" in msgs[0] and "No space left" in msgs[0]
    assert dest.is_dir() and _leftovers(tmp_path / "cache") == []  # the damaged copy is left as it was


def test_stale_temporaries_are_removed_but_not_a_live_conversion(fake_gguf, tmp_path):
    src, gguf, calls = fake_gguf
    cache = tmp_path / "cache"
    cache.mkdir()
    stale = cache / (cache_integrity.TMP_PREFIX + "killed")
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"partial")
    with cache_integrity.cache_lock(cache) as held:  # another process converting: its lock is held
        assert held
        (cache / (cache_integrity.TMP_PREFIX + "live")).mkdir()
        with cache_integrity.cache_lock(cache, wait_s=0) as other:
            assert other is False  # flock: a second open file conflicts, even in one process
        embedded._sweep(cache)
        assert _leftovers(cache) == [cache_integrity.TMP_PREFIX + "killed", cache_integrity.TMP_PREFIX + "live"]
    embedded._sweep(cache)  # nobody converts now: both are stale
    assert _leftovers(cache) == []
    dest = embedded._converted_copy(src, gguf)
    (cache / (cache_integrity.TMP_PREFIX + "killed2")).mkdir()
    assert embedded._converted_copy(src, gguf) == dest and _leftovers(cache) == []  # swept on the fast path
    assert len(calls) == 1


def test_a_process_waiting_for_the_lock_uses_the_copy_the_other_made(fake_gguf, monkeypatch):
    src, gguf, calls = fake_gguf
    convert = embedded._convert_gguf
    started, release = threading.Event(), threading.Event()

    def slow(directory, gguf_name, out):
        started.set()
        assert release.wait(30)
        convert(directory, gguf_name, out)

    monkeypatch.setattr(embedded, "_convert_gguf", slow)
    results: list = []
    first = threading.Thread(target=lambda: results.append(embedded._converted_copy(src, gguf)))
    first.start()
    assert started.wait(30)
    second = threading.Thread(target=lambda: results.append(embedded._converted_copy(src, gguf)))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # waits for the lock instead of converting alongside
    release.set()
    first.join(30)
    second.join(30)
    assert len(results) == 2 and results[0] == results[1] and len(calls) == 1


def test_a_finished_copy_is_not_replaced_for_a_damage_another_process_repaired(fake_gguf):
    src, gguf, calls = fake_gguf
    dest = embedded._converted_copy(src, gguf)
    ino = dest.stat().st_ino
    out, msgs = _load_warnings(lambda: embedded._converted_copy(src, gguf, damaged=("an older copy", "it failed")))
    assert out == dest and dest.stat().st_ino == ino and len(calls) == 1 and msgs == []


_KILLED_CONVERSION = """
import sys, time
from pathlib import Path
from specot.models import cache_integrity, embedded
def convert(directory, gguf, out):
    (out / "model.safetensors").write_bytes(bytes(4096))  # half-written weights
    print("SPECOT-TEST-WRITING", flush=True)
    time.sleep(300)
embedded._convert_gguf = convert
embedded._converted_copy(Path(sys.argv[1]), sys.argv[2])
"""


def test_a_killed_conversion_leaves_nothing_once_the_next_run_is_done(fake_gguf, tmp_path):
    src, gguf, calls = fake_gguf
    cache = tmp_path / "cache"
    env = dict(os.environ, SPECOT_CACHE_DIR=str(cache))
    p = subprocess.Popen([sys.executable, "-c", _KILLED_CONVERSION, str(src), gguf], stdout=subprocess.PIPE,
                         text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "SPECOT-TEST-WRITING"  # mid-write, holding the lock
        assert len(_leftovers(cache)) == 1
        embedded._sweep(cache)  # a live conversion's directory stays
        assert len(_leftovers(cache)) == 1
        p.send_signal(signal.SIGKILL)
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
    assert len(_leftovers(cache)) == 1  # what a killed process leaves
    dest = embedded._converted_copy(src, gguf)  # the next run
    assert _leftovers(cache) == [] and (dest / embedded._CACHE_MARK).is_file() and len(calls) == 1
