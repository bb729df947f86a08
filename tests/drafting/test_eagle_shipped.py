"""The shipped EAGLE-3 head of the embedded target (``specot/data/eagle``, ``draft="eagle"``) and the
``"auto"`` draft (suffix decoding with that head, as trees, for the embedded target on a CPU; the
n-gram drafter elsewhere)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import specot
from specot.plan.auto import AUTO_MIN_CONFIDENCE_GREEDY, AutoChoice, auto_choice
from specot.drafting import EagleDrafter, HybridDrafter, NGramDrafter
from specot.drafting.eagle import EAGLE3_KEYS
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate
from specot.models.device import PrepackedLinear, prepacking_available
from specot.models.embedded import embedded_eagle_dir
from specot.models.int8 import Int8Linear
from specot.sampling import SamplingConfig

from model_helpers import tiny_lm


def test_head_files_layout_and_size():
    d = embedded_eagle_dir()
    total = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
    assert total <= 30 * 2**20, f"{total / 2**20:.1f} MB > 30 MB"
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["draft_vocab_size"] == 8192 and cfg["hidden_size"] == 576
    assert cfg["specot_q_temperature_ratio"] == 0.75  # measured calibration (docs/distillation.md, "Head variants")
    assert cfg["specot_int8_weights"] is True  # int8 weights on a CPU (half the bytes a bf16 pass reads)
    weights = load_file(str(d / "model.safetensors"))
    assert set(weights) == set(EAGLE3_KEYS)
    assert all(torch.isfinite(w.float()).all() for w in weights.values() if w.is_floating_point())


def test_auto_is_ngram_and_eagle_refuses_another_target():
    target = tiny_lm(0)
    assert isinstance(specot.load_drafter("auto", target), NGramDrafter)
    assert auto_choice(target) == AutoChoice("ngram", None, None)
    with pytest.raises(ValueError, match="eagle:PATH"):
        specot.load_drafter("eagle", target)


def test_auto_choice_for_the_embedded_target():
    """suffix+eagle trees in bf16 on a CPU: 3 x 6 gated by the head's confidence at temperature 0,
    2 x 3 ungated above; chains with another verifier; GREEDY-law tree options stay with the hybrid
    (as given, no gate), others go to the EAGLE head; the same in float32 where oneDNN prepacks the
    head (measured, docs/results.md), and ngram on CUDA (not measured there)."""
    def plan(target=None, device="cpu", **kw):
        got = auto_choice(target, device, dtype=kw.pop("dtype", "bfloat16"), **kw)
        assert isinstance(got, AutoChoice)
        return (got.draft, got.children, got.gamma, got.min_confidence)

    tau = AUTO_MIN_CONFIDENCE_GREEDY
    assert 0 < tau < 1
    for target in (None, "smollm2"):
        assert plan(target) == ("suffix+eagle", 2, 3, None)
        assert plan(target, temperature=0.7) == ("suffix+eagle", 2, 3, None)
        assert plan(target, temperature=0.0) == ("suffix+eagle", 3, 6, tau)
    assert plan(temperature=0.0, gamma=4) == ("suffix+eagle", 3, 4, tau)
    assert plan(temperature=0.0, n=2) == ("suffix+eagle", 2, None, None)  # tree options as given
    assert plan(temperature=0.0, verifier="block") == ("suffix+eagle", None, None, None)  # a chain: no gate
    assert plan(gamma=5) == ("suffix+eagle", 2, 5, None)
    assert plan(verifier="block") == ("suffix+eagle", None, None, None)  # a chain: any single-draft verifier
    assert plan(verifier_params={"lenience": 0.5}, verifier="lenient") == ("suffix+eagle", None, None, None)
    assert plan(n=3) == ("suffix+eagle", 3, None, None)  # GREEDY-law trees as given
    assert plan(tree="greedy", verifier="greedy") == ("suffix+eagle", None, None, None)
    assert plan(tree="wor", gamma=2) == ("eagle", None, 2, None)  # EAGLE trees take every law
    assert plan(n=2, verifier="kseq") == ("eagle", 2, None, None)
    assert plan(tree="prefix:2,1") == ("eagle", None, None, None)
    f32 = ("suffix+eagle", 3, 6, tau) if prepacking_available(torch.float32) else ("ngram", None, None, None)
    assert plan(dtype="float32", temperature=0.0) == f32
    assert plan(None, "cuda") == ("ngram", None, None, None)
    assert plan(None, "cuda:1") == ("ngram", None, None, None)
    assert plan("some/other-model") == ("ngram", None, None, None)


def test_load_drafter_gates_eagle_heads_only():
    """``min_confidence`` reaches the EAGLE head (alone or inside the hybrid) and is refused, in one
    line, for drafts without one and for values outside (0, 1)."""
    target = specot.load_embedded_target(dtype="float32")
    assert specot.load_drafter("eagle", target, min_confidence=0.1).min_confidence == 0.1
    assert specot.load_drafter("eagle", target).min_confidence is None
    hybrid = specot.load_drafter("suffix+eagle", target, min_confidence=0.25)
    assert isinstance(hybrid, HybridDrafter) and hybrid.model.min_confidence == 0.25
    for bad in ("ngram", "suffix", "distilled", "suffix+distilled"):
        with pytest.raises(ValueError, match="has none"):
            specot.load_drafter(bad, target, min_confidence=0.1)
    for bad in (0, 1.0, -0.5, True, "0.1"):
        with pytest.raises(ValueError, match=r"min_confidence must be a number in \(0, 1\)"):
            specot.load_drafter("eagle", target, min_confidence=bad)


@pytest.mark.slow
@pytest.mark.real_model
def test_auto_decodes_suffix_eagle_trees_in_bf16_and_the_plan_is_exact_in_float32():
    bf16 = specot.load_embedded_target(dtype="bfloat16")
    auto = specot.load_drafter("auto", bf16)
    assert isinstance(auto, HybridDrafter)
    assert isinstance(specot.load_drafter("eagle", bf16).head.lm_head, Int8Linear)  # the shipped head on a CPU in bf16
    assert auto_choice(bf16) == AutoChoice("suffix+eagle", 2, 3)
    prompt = "Write a Python function that returns the squares of a list of numbers."
    rep = specot.generate(prompt, target=bf16, temperature=0.0, max_new_tokens=16)
    assert rep.draft == f"suffix+eagle, tree greedy 3×6, min_confidence {AUTO_MIN_CONFIDENCE_GREEDY:g}"
    assert rep.result.method == "tree"
    f32 = specot.load_embedded_target(dtype="float32")
    assert isinstance(specot.load_drafter("auto", f32), HybridDrafter if prepacking_available(torch.float32) else NGramDrafter)
    f32_head = specot.load_drafter("eagle", f32).head  # float32: prepacked, where oneDNN can
    assert isinstance(f32_head.lm_head, PrepackedLinear if prepacking_available(torch.float32) else Int8Linear)
    rep = specot.generate(prompt, target=f32, draft="suffix+eagle", n=4, gamma=3, temperature=0.0,
                          max_new_tokens=24, baseline=True)
    assert rep.result.tokens == rep.baseline.tokens  # greedy = autoregressive in float32
    assert rep.result.stats.accepted > 0


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
