"""Draft trees in vLLM: specot's suffix trees scored in one target pass through the tree attention
backend and verified by specot's multi-draft verifiers, float32, against vLLM without speculation."""

from __future__ import annotations

import os

import pytest

from _engine_checks import ALPHA, greedy_ids, law_samples, spec_stats
from conftest import MAX_TOKENS, PROMPTS, TREE_PROMPTS, penalized_params, top_logprobs, traced

pytestmark = pytest.mark.slow

#: Node budget of a tree (num_speculative_tokens).
NODES = 12


def _tree_engine(verifier: str, nodes: int = NODES, **suffix):
    from specot_vllm import engines

    spec, extra = engines.speculative_config("specot-tree", nodes)
    # trees in every batch these tests run (the batch-size gate has its own tests: test_gate_engine.py)
    extra["specot"].update(verifier=verifier, suffix=suffix, draft_max_batch=64)
    return engines.make_llm(spec, extra, disable_log_stats=False)


@pytest.fixture(scope="module")
def engine(reference):
    # the broken-engine test sends a function to the worker (collective_rpc pickles it)
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    from specot_vllm import engines

    llm = _tree_engine("greedy", adaptive=False)  # every node up to the budget: the most branching
    yield llm
    engines.shutdown(llm)


def _set_break(worker, kv_move: bool = True) -> bool:
    """In the worker: skip (or restore) the KV compaction after verification — the tree runner's
    ``move_slots`` replaced by one that moves nothing (a deliberately broken engine)."""
    from specot_vllm import tree_attn, tree_runner

    tree_runner.move_slots = tree_attn.move_slots if kv_move else (lambda kv_caches, src, dst: None)
    return True


def test_greedy_equals_vllm_without_speculation(engine, reference):
    assert greedy_ids(engine, PROMPTS + TREE_PROMPTS) == reference["tree_greedy"]
    assert spec_stats(engine).get("spec_decode_num_accepted_tokens", 0) > 0
    # specot's tree verifier ran in the worker, and an accepted path went through a later child
    assert any(d["verifier"] == "GreedyVerifier" for d in traced("tree_verify"))
    assert traced("kv_move")


def test_batch_gives_each_request_what_it_gives_alone(engine, reference):
    """Requests with different acceptance lengths in one batch, in another order, and alone."""
    prompts = PROMPTS + TREE_PROMPTS
    order = [4, 2, 0, 5, 3, 1]
    batched = greedy_ids(engine, [prompts[i] for i in order])
    alone = [greedy_ids(engine, [p])[0] for p in prompts]
    assert [batched[order.index(i)] for i in range(len(prompts))] == alone == reference["tree_greedy"]


def test_penalties_and_logprobs_beside_trees_are_vllms(engine, reference):
    """A request with a repetition penalty and logprobs, batched with tree requests: served by
    vLLM's own sampler one token per step, it gets vLLM's tokens and logprobs; the tree request
    beside it gets its greedy text."""
    from vllm import SamplingParams

    outs = engine.generate([TREE_PROMPTS[0], PROMPTS[0]],
                           [SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS), penalized_params()], use_tqdm=False)
    assert list(outs[0].outputs[0].token_ids) == reference["tree_greedy"][len(PROMPTS)]
    ids, lps = reference["penalized"]
    got = outs[1].outputs[0]
    assert list(got.token_ids) == ids
    for mine, ref in zip(top_logprobs(got.logprobs), lps):
        assert mine.keys() == ref.keys() and all(abs(mine[t] - ref[t]) < 1e-3 for t in ref)


def test_skipping_the_kv_move_is_caught(engine, reference):
    """A deliberately broken engine (the accepted path's K/V left in its tree slots) does not
    pass the greedy check: the check can fail."""
    engine.collective_rpc(_set_break, kwargs={"kv_move": False})
    try:
        broken = greedy_ids(engine, TREE_PROMPTS)
    finally:
        engine.collective_rpc(_set_break, kwargs={"kv_move": True})
    assert broken != reference["tree_greedy"][len(PROMPTS):]
    assert greedy_ids(engine, TREE_PROMPTS) == reference["tree_greedy"][len(PROMPTS):]


@pytest.fixture(scope="module", params=["kseq", "rrs_wor", "ot"])
def redrawn_engine(request, reference):
    from specot_vllm import engines

    # small trees (4 nodes, 2 children per node: two levels): 400 requests at once score every node
    llm = _tree_engine(request.param, nodes=4, children=2)
    yield request.param, llm
    engines.shutdown(llm)


def test_law_at_temperature_1_on_redrawn_trees(redrawn_engine, reference):
    """SpecTr's k-Seq and the optimal transport verifier ``ot`` (α*_iid at full vocabulary) on trees
    whose children are i.i.d. draws from the drafter's q, and recursive rejection sampling without
    replacement on trees drawn without replacement: the first three
    tokens (the third drawn at a tree node when the second was an accepted draft) follow vLLM's
    autoregressive law."""
    from specot_vllm.engines import law_check

    name, llm = redrawn_engine
    ok, p = law_check(law_samples(llm, reference["law_ids"]["repeat"], tokens=3), reference["law3"], ALPHA)
    assert ok, f"{name}: chi-square p-value {p:.2e} < {ALPHA}"
    cls = {"kseq": "KSeqVerifier", "rrs_wor": "RRSWORVerifier", "ot": "OTVerifier"}[name]
    assert any(d["verifier"] == cls and d["redrawn"] for d in traced("tree_verify"))
