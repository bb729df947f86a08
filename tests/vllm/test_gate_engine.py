"""The batch-size gate in an engine (embedded model, float32): with ``draft_max_batch = 2``, a batch
of 4 requests decodes with no draft proposed (vLLM's own counters) and gives vLLM's greedy text
without speculation; the same requests one at a time are drafted for, and give the same text.
specot's suffix chains (the proposer gates itself) and vLLM's ``ngram`` under specot's settings
(gated by vLLM's own batch-size schedule, which the plugin sets)."""

from __future__ import annotations

import pytest

from _engine_checks import greedy_ids, spec_stats
from conftest import MAX_TOKENS, PROMPTS, traced

pytestmark = pytest.mark.slow

GATE = {"draft_max_batch": 2}


@pytest.fixture(scope="module", params=["specot-suffix", "vllm-ngram"])
def engine(request, reference):
    from specot_vllm import engines

    spec, extra = engines.speculative_config(request.param, 4)
    extra = {"specot": {**(extra or {}).get("specot", {}), **GATE}}
    llm = engines.make_llm(spec, extra, disable_log_stats=False)
    yield llm
    engines.shutdown(llm)


def _drafted(llm) -> float:
    return spec_stats(llm).get("spec_decode_num_draft_tokens", 0.0)


def test_a_batch_above_the_threshold_proposes_nothing_and_decodes_as_vllm(engine, reference):
    from vllm import SamplingParams

    before = _drafted(engine)
    # ignore_eos: all four run every step (a request finishing early would shrink the batch to 2)
    sp = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = engine.generate(PROMPTS, sp, use_tqdm=False)
    # The engine core steps as soon as the first request arrives, so its first step may hold fewer
    # than 4 requests and be followed by one proposal (at most γ = 4 tokens each for 2 requests).
    # After that every step holds 4: nothing more. Without the gate these prompts draft on most of
    # their 23 steps (the second test: well over 8 tokens one at a time).
    assert _drafted(engine) - before <= 8
    for out, ref in zip(outs, reference["greedy"]):
        assert list(out.outputs[0].token_ids)[:len(ref)] == ref  # vLLM's text, up to its end of text


def test_requests_one_at_a_time_are_drafted_for_and_decode_as_vllm(engine, reference):
    before = _drafted(engine)
    alone = [greedy_ids(engine, [p])[0] for p in PROMPTS]
    assert alone == reference["greedy"]
    assert _drafted(engine) - before > 16  # below the threshold the drafts are back
    gates = traced("draft_max_batch")
    if gates:  # the custom-class proposer reports the threshold in force from the worker
        assert {"value": 2, "source": "set"} in [{k: g[k] for k in ("value", "source")} for g in gates]
