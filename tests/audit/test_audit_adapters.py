"""The engine adapters on small models: Hugging Face generate() (assistant model, prompt lookup) on
tiny random Llamas, llama-cpp-python on the embedded GGUF, and the prefix-memoized specot path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specot.audit.adapters import HFAdapter, SpecotAdapter, pad_rows
from specot.audit.memo import MemoModel
from specot.geometry import token_tree
from specot.audit.run import audit_greedy, audit_sampling
from specot.audit.stats import END
from specot.sampling import SamplingConfig

from model_helpers import tiny_llama, tiny_lm

PROMPT = [1, 5, 3, 7, 1, 5, 3]


def test_pad_rows():
    assert pad_rows([[1, 2, 3, 4], [5]], 3).tolist() == [[1, 2, 3], [5, END, END]]


def test_memo_model_returns_the_real_logits():
    real = tiny_lm(0, vocab=8)
    memo = MemoModel(tiny_lm(0, vocab=8))
    a = memo.logits_after([1, 2, 3], [4, 5])
    b = real.logits_after([1, 2, 3], [4, 5])
    torch.testing.assert_close(a, b)
    again = memo.logits_after([1, 2, 3, 4], [5])
    torch.testing.assert_close(again, b[1:])
    assert memo.hits >= 2
    t = memo.tree_logits([1, 2], token_tree([2, 3, 4, 6], [-1, 0, 1, 0]))
    torch.testing.assert_close(t[2], real.logits_after([1, 2, 3, 4])[0])
    memo.keep_tree_path([1, 2])
    assert memo.cached_ids == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="accepted path"):
        memo.tree_logits([1, 2], token_tree([2, 3, 4, 6], [-1, 0, 1, 0]))
        memo.keep_tree_path([3, 2])


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(assistant=True), dict(prompt_lookup=2)], ids=["assisted", "prompt-lookup"])
def test_hf_generate_adapters_are_exact_on_a_tiny_model(kw):
    model = tiny_llama(0, vocab=8, dtype=torch.float32)
    if kw.get("assistant"):
        kw = dict(assistant=tiny_llama(1, vocab=8, dtype=torch.float32))
    ad = HFAdapter(model, eos_token_id=None, **kw)
    plain = HFAdapter(model, eos_token_id=None)
    row = audit_sampling(ad, SamplingConfig(1.0), PROMPT, k=2, samples=300, min_prefix=40)
    assert row.reference == "exact law" and row.verdict.exact, row.verdict.min_adjusted_pvalue
    assert row.verdict.detectable_tv < 0.3
    g = audit_greedy(ad, plain, [PROMPT], tokens=6)
    assert g.label == "exact"


def test_hf_adapter_law_matches_specot():
    model = tiny_llama(0, vocab=8, dtype=torch.float64)
    s = SamplingConfig(0.7, top_k=5, top_p=0.9)
    hf = HFAdapter(model).target_law(PROMPT, [(), (2,), (4,)], s)
    sp = SpecotAdapter(tiny_lm(0, vocab=8), None, "plain").target_law(PROMPT, [(), (2,), (4,)], s)
    np.testing.assert_allclose(hf, sp, atol=1e-9)


@pytest.mark.slow
def test_llama_cpp_python_prompt_lookup_smoke():
    pytest.importorskip("llama_cpp")
    from pathlib import Path

    from specot.audit.adapters import LlamaCppPythonAdapter
    from specot.models.embedded import embedded_gguf

    path = str(Path(*embedded_gguf()))
    spec, plain = LlamaCppPythonAdapter(path, prompt_lookup=3), LlamaCppPythonAdapter(path)
    ids = [1, 1004, 28, 253, 1004, 28, 253, 1004, 28]
    a = spec.sample_first_tokens(ids, 3, 20, SamplingConfig(1.0), 0)
    b = plain.sample_first_tokens(ids, 3, 20, SamplingConfig(1.0), 0)
    assert a.shape == (20, 3) and (a >= 0).all()
    assert len({tuple(r) for r in b.tolist()}) > 1  # reseeded per sample: not one repeated draw
    assert audit_greedy(spec, plain, [ids], tokens=8).verdict.tokens == 8
    spec.close()
    plain.close()
