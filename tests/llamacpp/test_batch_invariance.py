"""``specot bench batch-invariance`` on the llama.cpp target (functional: the numbers are the
benchmark's, not asserted beyond their shape, except that a batched pass is compared with itself)."""

from __future__ import annotations

from specot_lab.bench.batch_invariance import compare_passes


def test_compare_passes_rows(target, prompt_ids):
    rows = compare_passes(target, list(prompt_ids[0])[:24], 4)
    assert len(rows) == 3
    assert all(r["max_abs_logit_diff"] >= 0 and 0 <= r["tv_T1"] <= 1 for r in rows)
    assert all(r["argmax_differs"] in (0.0, 1.0) for r in rows)
