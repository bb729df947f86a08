"""specot's EAGLE-3 head in vLLM, drafting probabilistically from its calibrated law q, verified by
specot's verifier; float32."""

from __future__ import annotations

import pytest

from _engine_checks import ALPHA, greedy_ids, law_samples, spec_stats
from conftest import traced

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(reference):
    from specot_vllm import engines

    spec, extra = engines.speculative_config("specot-eagle3", 3)
    llm = engines.make_llm(spec, extra, disable_log_stats=False)
    yield llm
    engines.shutdown(llm)


def test_greedy_equals_vllm_without_speculation(engine, reference):
    assert greedy_ids(engine) == reference["greedy"]
    assert spec_stats(engine).get("spec_decode_num_accepted_tokens", 0) > 0


def test_law_at_temperature_1_matches_autoregressive_sampling(engine, reference):
    from specot_vllm.engines import law_check

    ok, p = law_check(law_samples(engine, reference["law_ids"]["open"]), reference["laws"]["open"], ALPHA)
    assert ok, f"chi-square p-value {p:.2e} < {ALPHA}"
    # the head drafted from its calibrated law (r = 0.75 from its config.json), and specot's
    # verifier read that law
    assert any(d["ratio"] == 0.75 for d in traced("eagle_q"))
    assert any(d["verifier"] == "speculative() lossless" and d["draft_probs"] for d in traced("verify"))
