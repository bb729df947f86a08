"""No code runs from a file a ``specot distill`` command reads: a data shard or a training
checkpoint that holds a pickled call (``__reduce__`` returning ``os.mkdir``) is refused, unrun,
with one line naming the file; and ``distill train`` reaches its training code (the handler calls
the training function, not its module)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from specot.cli.main import main as cli_main
from specot.models import load_model
from specot_lab import cli_distill
from specot_lab.distill import data as D
from specot_lab.distill.files import load_torch_file, save_torch_file

pytestmark = pytest.mark.filterwarnings("ignore")

_ARCH = ["--hidden", "16", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--intermediate", "32",
         "--batch-tokens", "64", "--warmup", "1", "--eval-every", "1000"]


class _Payload:
    """Unpickled with ``weights_only=False``, it creates the directory ``marker``."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(tiny_model_dir, dtype="float32")


@pytest.fixture(scope="module")
def shards(tiny, tmp_path_factory):
    """Shards of the tiny target's answers with top-k labels (what ``distill train`` needs)."""
    d = tmp_path_factory.mktemp("shards")
    D.generate_shards(tiny, ["the cat sat", "a dog ran to the park", "big red mat", "the park"], d,
                      D.SampleConfig(batch_size=2, max_new_tokens=4, top_k=8), progress=False)
    return d


@pytest.fixture
def stand_in(monkeypatch, tiny):
    """``distill train`` and ``export`` load the tiny target in place of the embedded one."""
    monkeypatch.setattr(cli_distill, "load_embedded_target", lambda dtype="float32": tiny, raising=False)


def _one_line_naming(capsys, path) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("specot: error")]  # progress lines aside
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("specot: error: ") and str(path) in lines[0], lines
    return lines[0]


def _plant(path, marker, body) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(body(_Payload(marker)), path)


def _case(name, tmp_path, shards, tiny_model_dir):
    """(command line, the planted file, what it holds around the payload)."""
    out, bad = tmp_path / "out", tmp_path / "bad"
    if name == "export":
        (bad / "train_config.json").parent.mkdir(parents=True)
        (bad / "train_config.json").write_text(json.dumps({"arch": {"hidden": 16, "layers": 1, "heads": 2,
                                                                    "kv_heads": 1, "intermediate": 32}}))
        return ["distill", "export", "--run", str(bad), "--out", str(out)], bad / "ckpt.pt", lambda p: {"model": p}
    shard = (bad / "shard_00000.pt", lambda p: {"seqs": [p]})
    if name == "train-data":
        return ["distill", "train", "--data", str(bad), "--out", str(out), *_ARCH], *shard
    if name == "train-val":
        return ["distill", "train", "--data", str(shards), "--val", str(bad), "--out", str(out), *_ARCH], *shard
    if name == "eagle-data":
        return ["distill", "eagle", "--target", str(tiny_model_dir), "--data", str(bad), "--out", str(out)], *shard
    if name == "train-resume":
        return (["distill", "train", "--data", str(shards), "--out", str(out), *_ARCH], out / "ckpt.pt",
                lambda p: {"model": {}, "opt": p, "step": 1, "rng": torch.get_rng_state()})
    assert name == "eagle-resume"
    return (["distill", "eagle", "--target", str(tiny_model_dir), "--data", str(shards), "--out", str(out)],
            out / "ckpt.pt", lambda p: {"head": {}, "opt": p, "step": 1, "draft_vocab": [0], "layers": [0]})


@pytest.mark.parametrize("name", ["export", "train-data", "train-val", "eagle-data", "train-resume", "eagle-resume"])
def test_a_pickled_call_in_a_distill_file_never_runs(name, tmp_path, capsys, shards, tiny_model_dir, stand_in):
    marker = tmp_path / "payload-ran"
    argv, planted, body = _case(name, tmp_path, shards, tiny_model_dir)
    _plant(planted, marker, body)
    assert cli_main(argv) == 1
    line = _one_line_naming(capsys, planted)
    assert "was not loaded" in line and "posix.mkdir" in line, line
    assert not marker.exists()


def test_the_files_specot_writes_load_without_running_code(tmp_path, shards):
    """What the training writes (model and optimizer state, step, RNG state) loads with weights_only."""
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    save_torch_file({"model": model.state_dict(), "opt": opt.state_dict(), "step": 3, "rng": torch.get_rng_state()},
                    tmp_path / "ckpt.pt")
    state = load_torch_file(tmp_path / "ckpt.pt", "training checkpoint", keys=("model", "opt", "step", "rng"))
    assert state["step"] == 3 and state["opt"]["param_groups"][0]["betas"] == (0.9, 0.95)
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*"))
    assert len(list(D.iter_shards(shards))) == 4


@pytest.mark.parametrize("body,why", [(b"not a torch file", "was not loaded"), (None, "holds a list"),
                                      ({"model": 1}, "has no 'seqs' entry")])
def test_a_damaged_or_foreign_shard_is_one_line(tmp_path, body, why):
    path = tmp_path / "shard_00000.pt"
    if isinstance(body, bytes):
        path.write_bytes(body)
    else:
        torch.save([1, 2] if body is None else body, path)
    with pytest.raises(ValueError, match=why) as info:
        list(D.iter_shards(tmp_path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_distill_train_runs_its_training(tmp_path, capsys, shards, stand_in):
    out = tmp_path / "run"
    assert cli_main(["distill", "train", "--data", str(shards), "--out", str(out), "--max-steps", "1", *_ARCH]) == 0
    assert "trained in" in capsys.readouterr().out
    state = load_torch_file(out / "ckpt.pt", "training checkpoint", keys=("model", "step"))
    assert state["step"] == 1
    assert cli_main(["distill", "export", "--run", str(out), "--out", str(tmp_path / "export")]) == 0
    assert (tmp_path / "export" / "model.safetensors").is_file()
