"""benchmarks/eval_q_law.py: the draft laws it scores and their exact acceptances, on crafted rows."""

from __future__ import annotations

import pytest
import torch

from model_helpers import load_script

law = load_script("eval_q_law")


def test_untruncated_law_is_the_tempered_softmax_and_truncation_cuts_the_tail():
    z = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    assert torch.allclose(law.truncated_law(z, 0.5, 1.0, 0.0), torch.softmax(z / 0.5, -1))
    q = law.truncated_law(z, 1.0, 0.7, 0.0)  # softmax(z) = .64 .24 .09 .03: the top two cover 0.7
    assert (q[0, 2:] == 0).all() and q[0, :2].sum() == pytest.approx(1.0)
    assert q[0, 0] / q[0, 1] == pytest.approx(float(torch.exp(torch.tensor(1.0))))
    m = law.truncated_law(z, 1.0, 1.0, 0.2)  # min-p 0.2 of 0.64: drops the tokens below 0.129
    assert (m[0, 2:] == 0).all() and (m[0, :2] > 0).all()


def test_acceptances_are_exact_on_crafted_rows():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]])
    one, two = law.acceptances(p, p.clone())
    assert torch.allclose(one, torch.ones(2)) and torch.allclose(two, torch.ones(2))  # q = p accepts always
    q = torch.tensor([[0.0, 0.0, 0.0, 1.0], [0.7, 0.1, 0.1, 0.1]])
    one, two = law.acceptances(p, q)
    assert one.tolist() == pytest.approx([0.0, 0.1 + 0.1 + 0.1 + 0.1])
    # row 2: top = token 0 (p = 0.1), rest = 1/3 each on tokens 1-3: min(.2, 1/3) + min(.3, 1/3) + min(.4, 1/3)
    assert two[1].item() == pytest.approx(0.1 + 0.2 + 0.3 + 1 / 3)
    # row 1: top = token 3 (p = 0), the rest of q is empty: only p(top) = 0 counts
    assert two[0].item() == pytest.approx(0.0)
