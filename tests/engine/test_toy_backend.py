"""The example backend of docs/engine.md ("Adding a backend"): one file, the target protocol over a
fixed logit table, run through ``specot.generate`` as any backend is."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

import specot
from specot.models.protocol import TargetModel

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "toy_backend.py"
PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3]  # repeats: the suffix drafter finds continuations


def _toy(seed: int = 0, vocab: int = 12):
    spec = importlib.util.spec_from_file_location("toy_backend", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    gen = torch.Generator().manual_seed(seed)
    return module.ToyTarget(3.0 * torch.randn(vocab, vocab, generator=gen))


def _argmax_decode(table: torch.Tensor, prompt: list[int], n: int) -> list[int]:
    out, last = [], prompt[-1]
    for _ in range(n):
        last = int(table[last].argmax())
        out.append(last)
    return out


def test_the_docs_show_the_example_file_as_it_is():
    doc = (ROOT / "docs" / "engine.md").read_text(encoding="utf-8")
    section = doc.split("## Adding a backend", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert block == EXAMPLE.read_text(encoding="utf-8")
    assert len(block.splitlines()) <= 45  # about forty lines: adding a backend is one small file


@pytest.mark.parametrize("draft, verifier", [("none", None), ("ngram", None), ("suffix", "greedy")])
def test_greedy_decoding_on_the_toy_backend_is_argmax_decoding(draft, verifier):
    target = _toy()
    assert isinstance(target, TargetModel)
    trees, paths = [], []
    scored, kept = target.tree_logits, target.keep_tree_path
    target.tree_logits = lambda context, tree, **kw: (trees.append(tree), scored(context, tree, **kw))[1]
    target.keep_tree_path = lambda path: (paths.append(list(path)), kept(path))[1]
    kw = {"verifier": verifier} if verifier else {}
    rep = specot.generate(PROMPT, target=target, draft=draft, n=3 if draft == "suffix" else None,
                          temperature=0.0, max_new_tokens=24, **kw)
    assert rep.result.tokens == _argmax_decode(target.table, PROMPT, 24)
    assert len(paths) == len(trees) and (len(trees) > 0) == (draft == "suffix")  # trees handed over as they are
    assert all(not t.is_chain() for t in trees)


def test_a_seeded_tree_run_on_the_toy_backend_repeats():
    runs = [specot.generate(PROMPT, target=_toy(), draft="suffix", n=3, verifier="greedy", temperature=1.0,
                            max_new_tokens=24, seed=5).result for _ in range(2)]
    assert runs[0].tokens == runs[1].tokens and len(runs[0].tokens) == 24
    assert all(0 <= t < 12 for t in runs[0].tokens)


def test_the_toy_backend_refuses_a_path_outside_its_tree():
    target = _toy()
    tree = specot.drafting.DraftTree.root(3)
    a, b = tree.add_children(0, [5, 7])
    tree.add_children(a, [2])
    rows = target.tree_logits([1, 3], tree)  # [1 + 3, V]: after 3, after 3 5, after 3 7, after 3 5 2
    assert torch.equal(rows, target.table[[3, 5, 7, 2]])
    with pytest.raises(ValueError, match="accepted path"):
        target.keep_tree_path([b, 3])  # node 3 hangs below node 1, not node 2
