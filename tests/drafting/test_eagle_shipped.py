"""The shipped EAGLE-3 head of the embedded target (``specot/data/eagle``, ``draft="eagle"``) and the
``"auto"`` draft (n-gram: the fastest drafter measured on the CPU)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import specot
from specot.drafting import EagleDrafter, NGramDrafter
from specot.drafting.eagle import EAGLE3_KEYS
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate
from specot.models.embedded import embedded_eagle_dir
from specot.sampling import SamplingConfig

from conftest import tiny_lm


def test_head_files_layout_and_size():
    d = embedded_eagle_dir()
    total = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
    assert total <= 30 * 2**20, f"{total / 2**20:.1f} MB > 30 MB"
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["draft_vocab_size"] == 8192 and cfg["hidden_size"] == 576
    weights = load_file(str(d / "model.safetensors"))
    assert set(weights) == set(EAGLE3_KEYS)
    assert all(torch.isfinite(w.float()).all() for w in weights.values() if w.is_floating_point())


def test_auto_is_ngram_and_eagle_refuses_another_target():
    target = tiny_lm(0)
    assert isinstance(specot.load_drafter("auto", target), NGramDrafter)
    with pytest.raises(ValueError, match="eagle:PATH"):
        specot.load_drafter("eagle", target)


@pytest.mark.slow
@pytest.mark.real_model
def test_shipped_head_is_accepted_and_greedy_equals_autoregressive():
    target = specot.load_embedded_target(dtype="float32")
    drafter = specot.load_drafter("eagle", target)
    assert isinstance(drafter, EagleDrafter)
    ids = target.encode_prompt("Write a Python function that returns the squares of a list of numbers.")
    cfg = GenerationConfig(max_new_tokens=32, gamma=4, sampling=SamplingConfig(0.0))
    ar = autoregressive_generate(target, ids, cfg)
    sd = speculative_generate(target, drafter, ids, cfg)
    assert sd.tokens == ar.tokens
    assert sd.stats.accepted > 0
