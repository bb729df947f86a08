"""specot's suffix drafter behind vLLM's custom-class proposer interface (no vLLM needed)."""

from __future__ import annotations

from types import SimpleNamespace

from conftest import token_rows
import pytest

pytest.importorskip("specot_vllm")

from specot_vllm import SuffixProposer  # noqa: E402


def _config(k=4, extra=None):
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=k),
                           model_config=SimpleNamespace(max_model_len=64, hf_config=SimpleNamespace(eos_token_id=2)),
                           additional_config=extra or {})


def test_drafts_continue_the_earlier_occurrence_per_row_and_follow_the_row():
    prop = SuffixProposer(_config(extra={"specot": {"suffix": {"adaptive": False}}}))
    a = [5, 6, 7, 8, 9, 5, 6]  # "5 6" occurred before, followed by 7 8 9 5
    b = [10, 11, 12, 13]  # nothing repeats: no draft
    table, n = token_rows(a, b)
    assert prop.propose([[6], [13]], n, table) == [[7, 8, 9, 5], []]
    # the row continues: 2 of 4 drafts accepted, then the correction 3
    a2 = a + [7, 8, 3]
    table, n = token_rows(a2, b + [14])
    out = prop.propose([[7, 8, 3], [14]], n, table)
    assert out[1] == [] and all(isinstance(t, int) for t in out[0])
    # another request takes row 0: a fresh drafter, drafts from its own text only
    c = [20, 21, 22, 20, 21]
    table, n = token_rows(c)
    assert prop.propose([[21]], n, table) == [[22, 20, 21]]
    assert prop.propose([[]], n, table) == [[]]  # a request that sampled nothing is not drafted for


def test_bad_drafter_options_are_one_clear_error():
    with pytest.raises((ValueError, TypeError)):
        SuffixProposer(_config(extra={"specot": {"suffix": {"max_n": 0}}}))
