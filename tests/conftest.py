"""Shared fixtures: tiny random Llama models (built by ``model_helpers``, which tests import by
name), a tiny on-disk model directory with a word-level tokenizer for loader and CLI tests, and a
spy on host conversions."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

from model_helpers import tiny_llama, tiny_lm
from specot.models import CausalLM

# Tiny-model tests are dominated by per-op overhead: one intra-op thread avoids thread spin-up
# (about 20x faster on a loaded 2-core machine) and keeps timings independent of the host.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _lazy_names_forgotten():
    """A lab module binds its lazy names on first use (:mod:`specot_lab.lazy`); one bound while a
    test stood in for its source (a monkeypatched ``specot.api.load_target``) would outlive that
    test. Names bound during a test are forgotten after it, so the next use binds the real one."""
    import sys

    from specot_lab.lazy import LazyNames

    def lazy_modules():
        return [m for m in list(sys.modules.values()) if isinstance(getattr(m, "__dict__", {}).get("_NAMES"), LazyNames)]
    before = {m.__name__: {n for n in m._NAMES.table if n in m.__dict__} for m in lazy_modules()}
    yield
    for m in lazy_modules():
        for n in set(m._NAMES.table) - before.get(m.__name__, set()):
            m.__dict__.pop(n, None)


@pytest.fixture(autouse=True)
def _one_thread():
    """Every test runs with one intra-op thread (restored afterwards, whatever the test set)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


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
