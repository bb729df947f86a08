"""A GGUF file as the target of ``specot generate`` and :func:`specot.generate`: ``--backend llamacpp``
(or ``auto``) loads it; a directory, the wrong backend or a damaged file is one line naming the
path; the report gives the GGUF's weight type and the llama.cpp exactness contract (greedy equal up
to near-ties), not float32's."""

from __future__ import annotations

import json
import shutil

import pytest

import specot
from specot.cli.main import main as cli_main
from specot.models.embedded import embedded_gguf
from specot.plan import make_plan

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    """A copy of the embedded SmolLM2 Q4_1 GGUF, alone in its directory."""
    directory, name = embedded_gguf()
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    shutil.copyfile(directory / name, path)
    return path


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("specot: error: ") and "Traceback" not in err, err
    return lines[0]


def test_a_gguf_file_runs_from_the_cli(gguf, capsys):
    assert cli_main(["generate", "--backend", "llamacpp", "--target", str(gguf), "--prompt", "hi", "--max-new-tokens",
                     "2", "--temperature", "0", "--draft", "ngram", "--ngram-corpus", "none", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["backend"] == "llamacpp" and len(obj["speculative"]["tokens"]) >= 1
    assert obj["dtype"] == "Q4_1" and obj["lossless"] is True
    assert "up to near-ties" in obj["exactness"] and "float32" not in obj["exactness"]


@pytest.mark.parametrize("as_path", [False, True])
def test_backend_auto_picks_llamacpp_for_a_gguf_file(gguf, as_path):
    target = gguf if as_path else str(gguf)
    assert make_plan("ngram", target=target).backend == "llamacpp"
    assert make_plan("auto", target=target, temperature=0).backend == "llamacpp"


def test_a_directory_or_the_wrong_backend_is_one_line_before_loading(gguf, capsys, monkeypatch):
    import specot.api as api

    monkeypatch.setattr(api, "load_target", lambda *a, **k: pytest.fail("a model was loaded"))
    base = ["generate", "--prompt", "hi", "--draft", "ngram"]
    assert cli_main(base + ["--backend", "llamacpp", "--target", str(gguf.parent)]) == 1
    line = _error_line(capsys)
    assert f"holds {gguf.name}: pass that file" in line and str(gguf.parent) in line
    assert cli_main(base + ["--backend", "transformers", "--target", str(gguf)]) == 1
    line = _error_line(capsys)
    assert "is a .gguf file, which the llamacpp backend loads; pass --backend llamacpp" in line


@pytest.mark.parametrize("size,why", [
    (20, "shorter than the 24-byte header"),
    (100_000, "unpack_from requires a buffer"),  # struct.error inside the metadata
    (2_000_000, "cannot reshape array"),  # numpy, inside the token table
])
def test_a_truncated_gguf_is_named(gguf, tmp_path, size, why):
    short = tmp_path / f"short-{size}.gguf"
    with open(gguf, "rb") as f:
        short.write_bytes(f.read(size))
    with pytest.raises(ValueError) as exc:
        specot.load_target(short, backend="llamacpp")
    text = str(exc.value)
    assert text.startswith(f"{str(short)!r} is not a valid GGUF file (truncated?)") and why in text, text
    assert "\n" not in text


def test_not_a_gguf_file_and_a_truncated_one_on_the_cli(gguf, tmp_path, capsys):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04" + bytes(100))
    short = tmp_path / "short.gguf"
    with open(gguf, "rb") as f:
        short.write_bytes(f.read(100_000))
    assert cli_main(["generate", "--prompt", "hi", "--target", str(fake)]) == 1
    assert "is not a GGUF file (it does not start with the bytes 'GGUF')" in _error_line(capsys)
    assert cli_main(["generate", "--prompt", "hi", "--target", str(short), "--json"]) == 1
    out = capsys.readouterr().out
    assert "is not a valid GGUF file (truncated?)" in json.loads(out)["error"]


def test_the_report_gives_the_weight_type_on_the_embedded_target(target):
    report = specot.generate("hi", target=target, draft="ngram", ngram_corpus=None, temperature=0.0,
                             max_new_tokens=2)
    d = report.to_dict()
    assert d["backend"] == "llamacpp" and d["dtype"] == "Q4_1" and "up to near-ties" in d["exactness"]
