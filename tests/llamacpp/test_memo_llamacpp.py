"""The audit's memoized model in front of the llama.cpp target: a row computed again after it left
memory equals the row the engine first saw, bit for bit (llama.cpp's one-token passes compute
other logits than its batched passes; specot.audit.memo runs two tokens at least in every pass)."""

from __future__ import annotations

import torch

from specot.audit.memo import MemoModel
from specot.geometry import token_tree


def test_a_recomputed_row_is_the_first_one_bit_for_bit(target, prompt_ids):
    prompt = tuple(prompt_ids[0])
    memo = MemoModel(target, max_rows=2)
    target.rollback(0)
    target.logits_after(list(prompt))  # the real cache ends at the prompt: a lone next token would run alone
    first = memo.rows([prompt + (30,)])[0].clone()
    memo.rows([prompt + (504,), prompt + (57,), prompt + (57, 28)])  # pushes the row out of memory
    assert prompt + (30,) not in memo._rows
    again = memo.rows([prompt + (30,), prompt + (30, 504)])[0]  # now a chain pass of several tokens
    assert torch.equal(first, again)
    tree = memo.tree_logits(list(prompt + (30,)), token_tree([30, 504, 57], [-1, 0, 0]))
    assert torch.equal(tree[0], first)
