"""Shared fixtures: tiny random Llama models built from a config (no hub access), a tiny
on-disk model directory with a word-level tokenizer for loader and CLI tests, and the measurement
scripts in ``benchmarks/`` loaded as modules."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

from specot.models import CausalLM

# Tiny-model tests are dominated by per-op overhead: one intra-op thread avoids thread spin-up
# (about 20x faster on a loaded 2-core machine) and keeps timings independent of the host.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_thread():
    """Every test runs with one intra-op thread (restored afterwards, whatever the test set)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny_llama(seed: int, vocab: int = 16, dtype: torch.dtype = torch.float64, layers: int = 2,
               hidden: int = 32, max_pos: int = 256, eos: int | None = None):
    """A random LlamaForCausalLM; weights scaled up so its distributions are far from uniform."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_pos,
                      eos_token_id=eos, bos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # sharper next-token distributions
    return model.to(dtype).eval()


def tiny_lm(seed: int, **kw) -> CausalLM:
    return CausalLM(tiny_llama(seed, **kw), name=f"tiny-{seed}")


def load_script(name: str) -> ModuleType:
    """``benchmarks/**/<name>.py`` as a module (the measurement scripts are files, not an importable
    package); ``name`` may include its folder (``"gpu/cuda_check"``)."""
    root = Path(__file__).resolve().parents[1] / "benchmarks"
    found = [root / f"{name}.py"] if (root / f"{name}.py").exists() else sorted(root.rglob(f"{name}.py"))
    if len(found) != 1:
        raise FileNotFoundError(f"benchmarks/ holds {len(found)} scripts named {name}.py")
    path = found[0]
    spec = importlib.util.spec_from_file_location(Path(name).name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.fixture
def host_conversions(monkeypatch) -> list[str]:
    """The names of the tensor-to-host conversions (``tolist``, ``item``, ``bool``/``int``/``float``/
    ``index``, ``numpy``) made while the test runs, in order: each is a device sync on CUDA."""
    calls: list[str] = []
    for name in ("tolist", "item", "__bool__", "__int__", "__float__", "__index__", "numpy"):
        orig = getattr(torch.Tensor, name)

        def spy(self, *a, _orig=orig, _name=name, **k):
            calls.append(_name)
            return _orig(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, spy)
    return calls


@pytest.fixture
def tiny_target() -> CausalLM:
    return tiny_lm(0)


@pytest.fixture
def tiny_draft() -> CausalLM:
    return tiny_lm(1)


WORDS = ["<eos>", "the", "a", "cat", "dog", "sat", "on", "mat", "and", "ran", "to", "park", "big", "small", "red", "blue"]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A saved tiny Llama + word-level tokenizer (vocabulary of 16 words) in a temp directory."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("tiny_model")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<eos>")
    fast.save_pretrained(d)
    model = tiny_llama(3, vocab=len(WORDS), dtype=torch.float32, eos=0)
    model.save_pretrained(d)
    return d
