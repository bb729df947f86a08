"""The batch-size gate of specot's proposers (``additional_config.specot.draft_max_batch``): no
drafts after a step of more requests than the threshold, drafts again below it, the default per
device, one-line refusals of bad values, and vLLM's own ``ngram`` schedule built from it (no engine;
the engine run is in ``test_gate_engine.py``)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from conftest import token_rows

pytest.importorskip("specot_vllm")

from specot_vllm import SuffixProposer, SuffixTreeProposer  # noqa: E402
from specot_vllm.config import (CPU_FLAT_TOKENS, SpecotConfigError, default_draft_max_batch,  # noqa: E402
                                draft_max_batch, ngram_schedule, parse_config)

#: "5 6" occurred before, followed by 7 8 9 5: every row drafts [7, 8, 9, 5] with γ = 4.
REPEAT = [5, 6, 7, 8, 9, 5, 6]


def _config(k=4, extra=None, device="cpu"):
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=k),
                           model_config=SimpleNamespace(max_model_len=64, hf_config=SimpleNamespace(eos_token_id=2),
                                                        get_vocab_size=lambda: 64, seed=0),
                           device_config=SimpleNamespace(device_type=device),
                           additional_config=extra or {})


def _step(prop, batch: int, grown: int = 0) -> list[list[int]]:
    """One proposal after a step of ``batch`` requests, every one the repeating text (``grown``
    tokens of its continuation committed since the first step)."""
    seq = REPEAT + [7, 8, 9, 5, 6][:grown]
    table, n = token_rows(*([seq] * batch))
    return prop.propose([[seq[-1]]] * batch, n, table)


@pytest.mark.parametrize("max_batch", [1, 3, 8])
def test_chains_draft_up_to_the_threshold_and_not_above(max_batch):
    prop = SuffixProposer(_config(extra={"specot": {"suffix": {"adaptive": False}, "draft_max_batch": max_batch}}))
    assert prop.draft_max_batch == max_batch
    for b in range(1, max_batch + 1):
        assert _step(prop, b) == [[7, 8, 9, 5]] * b, b
    for b in (max_batch + 1, max_batch + 2, 2 * max_batch + 3):
        assert _step(prop, b) == [[]] * b, b


def test_drafts_resume_when_the_batch_shrinks_and_follow_the_text_committed_meanwhile():
    prop = SuffixProposer(_config(extra={"specot": {"suffix": {"adaptive": False}, "draft_max_batch": 2}}))
    assert _step(prop, 2) == [[7, 8, 9, 5]] * 2
    assert _step(prop, 4) == [[]] * 4  # gated: the drafters' indexes are not fed
    # two of the four finished; rows 0 and 1 committed "7 8 9" while gated: the index catches up
    assert _step(prop, 2, grown=3) == [[5, 6, 7, 8]] * 2


def test_trees_are_gated_too_and_leave_no_tree_behind():
    prop = SuffixTreeProposer(_config(k=8, extra={"specot": {"suffix": {"adaptive": False}, "draft_max_batch": 1}}))
    out = _step(prop, 1)
    assert out[0] and prop.last_trees[0].tokens[1:] == out[0]
    assert _step(prop, 2) == [[], []] and prop.last_trees == {}


def test_the_default_keeps_drafts_at_batch_1_and_gates_wide_passes_on_the_cpu():
    assert CPU_FLAT_TOKENS == 16
    assert [default_draft_max_batch(g, cpu=True) for g in (1, 3, 4, 7, 12, 40)] == [8, 4, 3, 2, 1, 1]
    assert default_draft_max_batch(4, cpu=False) is None
    chain = SuffixProposer(_config(k=4, extra={"specot": {}}))
    assert chain.draft_max_batch == 3 and _step(chain, 3) != [[]] * 3 and _step(chain, 4) == [[]] * 4
    tree = SuffixTreeProposer(_config(k=12, extra={"specot": {}}))
    assert tree.draft_max_batch == 1
    assert SuffixProposer(_config(k=4, device="cuda")).draft_max_batch is None  # not measured there: no gate
    # a value set wins over the default, on any device
    assert draft_max_batch(parse_config({"specot": {"draft_max_batch": 5}}), 4, cpu=False) == (5, "set")
    assert draft_max_batch(None, 4, cpu=True) == (3, "default")


def test_the_threshold_in_force_is_logged_once_per_proposer():
    from specot_vllm import observe

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    observe.log.addHandler(handler)
    level = observe.log.level
    observe.log.setLevel(logging.INFO)
    try:
        prop = SuffixProposer(_config(k=4, extra={"specot": {}}))
        for b in (1, 4, 1, 4):
            _step(prop, b)
    finally:
        observe.log.removeHandler(handler)
        observe.log.setLevel(level)
    lines = [r.getMessage() for r in records if "draft" in r.getMessage()]
    assert len(lines) == 1 and "at most 3 requests" in lines[0] and "num_speculative_tokens = 4" in lines[0], lines


@pytest.mark.parametrize("value", [0, -1, 2.5, "8", True, [4], {}])
def test_a_bad_threshold_is_refused_in_one_line(value):
    with pytest.raises(SpecotConfigError) as e:
        parse_config({"specot": {"draft_max_batch": value}})
    msg = str(e.value)
    assert "\n" not in msg and "['draft_max_batch']" in msg and "integer >= 1" in msg and repr(value) in msg


def test_ngram_schedule_is_vllms_own_and_drafts_nothing_above_the_threshold():
    build_dynamic_sd_schedule_lookup = pytest.importorskip(
        "vllm.v1.spec_decode.dynamic.utils").build_dynamic_sd_schedule_lookup

    lookup = build_dynamic_sd_schedule_lookup(ngram_schedule(3, 4, 32), vllm_max_batch_size=32,
                                              vllm_num_speculative_tokens=4)
    assert lookup[1:] == [4, 4, 4] + [0] * 29
    assert ngram_schedule(32, 4, 32) is None and ngram_schedule(40, 4, 32) is None
