"""specot's suffix drafter (custom-class proposer) and specot's verifier inside vLLM, float32."""

from __future__ import annotations

import pytest

from _engine_checks import ALPHA, greedy_ids, law_samples, spec_stats
from conftest import PROMPTS, traced

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine(reference):
    from specot_vllm import engines

    spec, extra = engines.speculative_config("specot-suffix", 4)
    extra["specot"]["draft_max_batch"] = 64  # drafts in batches too (the gate's own tests: test_gate_engine.py)
    llm = engines.make_llm(spec, extra, disable_log_stats=False)
    yield llm
    engines.shutdown(llm)


def test_greedy_equals_vllm_without_speculation(engine, reference):
    assert greedy_ids(engine) == reference["greedy"]
    stats = spec_stats(engine)
    assert stats.get("spec_decode_num_accepted_tokens", 0) > 0, stats  # the drafts were used


def test_batch_gives_each_request_what_it_gives_alone(engine, reference):
    """Requests with different acceptance lengths (repetitive text, code, prose, counting) in one
    batch, in another order, and one at a time: token for token the same."""
    order = [2, 0, 3, 1]
    batched = greedy_ids(engine, [PROMPTS[i] for i in order])
    alone = [greedy_ids(engine, [p])[0] for p in PROMPTS]
    assert [batched[order.index(i)] for i in range(len(PROMPTS))] == alone == reference["greedy"]


def test_law_at_temperature_1_matches_autoregressive_sampling(engine, reference):
    from specot_vllm.engines import law_check

    ok, p = law_check(law_samples(engine, reference["law_ids"]["repeat"]), reference["laws"]["repeat"], ALPHA)
    assert ok, f"chi-square p-value {p:.2e} < {ALPHA}"
    # specot's verifier ran in the engine's worker, on deterministic drafts (no draft law)
    assert {"verifier": "speculative() lossless", "draft_probs": False} in [
        {k: d[k] for k in ("verifier", "draft_probs")} for d in traced("verify")]
