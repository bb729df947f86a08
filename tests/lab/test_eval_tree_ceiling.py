"""benchmarks/eval_tree_ceiling.py: the best-first search finds the N nodes of highest path probability,
checked against enumerating every path of a tiny model's vocabulary."""

from __future__ import annotations

import itertools

import pytest

from model_helpers import load_script, tiny_lm
from specot.sampling import SamplingConfig, standardize


@pytest.fixture(scope="module")
def etc():
    return load_script("eval_tree_ceiling")


def _all_path_probs(lm, context: list[int], sampling: SamplingConfig, depth: int, vocab: int) -> list[float]:
    """Path probability of every node of the full tree of ``depth`` levels, by one causal pass per prefix."""
    probs = []
    for d in range(1, depth + 1):
        for path in itertools.product(range(vocab), repeat=d - 1):
            lm.reset()
            p = standardize(lm.logits_after(context + list(path))[:1], sampling)[0]  # [V]
            head = 1.0
            for j, tok in enumerate(path):
                lm.reset()
                head *= float(standardize(lm.logits_after(context + list(path[:j]))[:1], sampling)[0, tok])
            probs.extend(head * float(x) for x in p)
    return sorted(probs, reverse=True)


@pytest.mark.parametrize("temperature,n,depth", [(1.0, 6, 2), (0.5, 10, 2), (1.0, 3, 1)])
def test_best_first_search_equals_enumeration(etc, temperature, n, depth):
    vocab = 8
    lm = tiny_lm(3, vocab=vocab)
    sampling = SamplingConfig(temperature=temperature)
    context = [1, 5, 2]
    got = etc.best_tree_path_probs(lm, context, sampling, n, depth, stop=set())
    want = _all_path_probs(lm, context, sampling, depth, vocab)[:n]
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert all(a >= b for a, b in zip(got, got[1:]))  # largest first


def test_eos_nodes_are_leaves(etc):
    lm = tiny_lm(4, vocab=8)
    sampling = SamplingConfig(temperature=1.0)
    every = set(range(8))  # every token stops: nothing below depth 1
    got = etc.best_tree_path_probs(lm, [2, 3], sampling, 5, 4, stop=every)
    lm.reset()
    root = sorted(standardize(lm.logits_after([2, 3])[:1], sampling)[0].tolist(), reverse=True)[:5]
    assert got == pytest.approx(root)
