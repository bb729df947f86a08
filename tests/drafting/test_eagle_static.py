"""EAGLE-2 trees built on the device over a static KV cache (``EagleDrafter.use_static_cache``,
:mod:`specot.drafting.eagle.static_tree`): the same trees as the host construction, node for node, on
tiny random targets; greedy decoding equal to autoregressive decoding; the capture fallback."""

from __future__ import annotations

import pytest
import torch

from specot.drafting import EagleDrafter, TreeSpec
from specot.drafting.eagle.static_tree import StaticTreeDraft
from specot.engine import GenerationConfig, autoregressive_generate, tree_generate
from specot.sampling import SamplingConfig

from model_helpers import tiny_lm

PROMPT = [1, 5, 3, 7]
GREEDY = SamplingConfig(temperature=0.0)
DRAFT_VOCAB = [1, 2, 3, 5, 7, 8, 9, 11, 12, 14]


class _Trees(EagleDrafter):
    """Records every proposed tree as (tokens, parents, drafts per node)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen = []

    def propose(self, context, *a, **kw):
        tree = super().propose(context, *a, **kw)
        self.seen.append((list(tree.tokens), list(tree.parents), {n: list(d) for n, d in tree.drafts.items()}))
        return tree


def _drafter(target, *, seed=1, num_layers=1, **kw) -> _Trees:
    base = EagleDrafter.random(target, draft_vocab=DRAFT_VOCAB, seed=seed, scale=5.0, num_layers=num_layers)
    return _Trees(base.head, target, **kw)


def _decode(target, drafter, spec, n=24, prompt=PROMPT):
    return tree_generate(target, drafter, prompt, spec, GenerationConfig(max_new_tokens=n, sampling=GREEDY),
                         verifier="greedy")


@pytest.mark.parametrize("shape,kw", [
    ((3, 3, 3, 3), dict(children=3, total_tokens=7)),
    ((3, 3, 3, 3, 3, 3), dict(children=3, total_tokens=18)),
    ((2, 2, 2), dict(children=2, total_tokens=6, width=1)),
    ((3, 3, 3, 3), dict(children=3, total_tokens=12, min_confidence=0.2)),
])
@pytest.mark.parametrize("num_layers", [1, 2])
def test_static_trees_are_the_host_trees_and_greedy_is_autoregressive(shape, kw, num_layers):
    """Every proposed tree is the host construction's, node for node (tokens, parents, children in
    order), over a whole greedy decode; the output equals autoregressive decoding."""
    target = tiny_lm(0, vocab=16, dtype=torch.float32, layers=4)
    spec = TreeSpec.prefix(list(shape), "greedy")
    host, dev = _drafter(target, num_layers=num_layers, **kw), _drafter(target, num_layers=num_layers, **kw)
    dev.use_static_cache(64)
    a, b = _decode(target, host, spec), _decode(target, dev, spec)
    ar = autoregressive_generate(target, PROMPT, GenerationConfig(max_new_tokens=24, sampling=GREEDY))
    assert a.tokens == b.tokens == ar.tokens
    assert dev._static is not None and len(host.seen) == len(dev.seen) > 3
    assert [t for t in host.seen if len(t[0]) > 1] and host.seen == dev.seen


def test_stop_tokens_are_not_expanded_and_long_catch_ups_run_unpadded():
    """An EOS node is never expanded (no children), as in the host construction; the first catch-up
    after a 20-token prompt (wider than any padded width) gives the same trees."""
    target = tiny_lm(0, vocab=16, dtype=torch.float32, layers=4)
    spec = TreeSpec.prefix([3, 3, 3, 3], "greedy")
    prompt = [1, 5, 3, 7, 2, 9, 11, 4, 6, 8, 10, 12, 13, 14, 15, 1, 2, 3, 4, 5]
    for stop in (set(), {3, 7, 9}):
        host, dev = _drafter(target, children=3, total_tokens=9), _drafter(target, children=3, total_tokens=9)
        dev.use_static_cache(80)
        cfg = GenerationConfig(max_new_tokens=24, sampling=GREEDY, stop_at_eos=False)
        for d in (host, dev):
            d.start(prompt, spec, None, frozenset(stop))
        # the engine's start() would reset the stop tokens: drive the same loop through the engine
        outs = []
        for d in (host, dev):
            orig = d.start
            d.start = lambda p, s, sch=None, st=frozenset(), _o=orig: _o(p, s, sch, frozenset(stop))
            outs.append(tree_generate(target, d, prompt, spec, cfg, verifier="greedy").tokens)
        assert outs[0] == outs[1] and host.seen == dev.seen
        for tokens, _, drafts in dev.seen:
            assert not any(tokens[n] in stop for n in drafts if n > 0)  # EOS nodes have no children


def test_a_failed_capture_warns_once_and_drafts_eagerly():
    """The capture path (CUDA only) falls back to eager passes on any failure, with one warning,
    and the trees stay the host construction's."""
    target = tiny_lm(0, vocab=16, dtype=torch.float32, layers=4)
    spec = TreeSpec.prefix([3, 3, 3], "greedy")
    host, dev = _drafter(target, children=3, total_tokens=8), _drafter(target, children=3, total_tokens=8)
    dev.use_static_cache(64, cuda_graphs=True)
    dev.start(PROMPT, spec, None, frozenset(target.eos_token_ids))  # as tree_generate starts it
    dev._static_tree(spec, GREEDY, len(PROMPT))  # built now, so that the test can force the capture path on a CPU
    dev._static.graphs = {}
    with pytest.warns(RuntimeWarning, match="capturing the EAGLE draft as a CUDA graph failed"):
        b = _decode(target, dev, spec)
    assert dev._static.graphs is None and _decode(target, host, spec).tokens == b.tokens
    assert host.seen == dev.seen


def test_other_trees_and_temperatures_take_the_host_path():
    """Chains, sampled trees (T > 0) and other laws are drafted as before with a static cache asked for."""
    target = tiny_lm(0, vocab=16, dtype=torch.float32, layers=4)
    dev = _drafter(target, children=2)
    dev.use_static_cache(64)
    tree_generate(target, dev, PROMPT, TreeSpec.prefix([2, 2], "greedy"),
                  GenerationConfig(max_new_tokens=8, sampling=SamplingConfig(1.0), seed=3), verifier="greedy")
    assert dev._static is None
    tree_generate(target, dev, PROMPT, TreeSpec.prefix([2, 2], "wor"),
                  GenerationConfig(max_new_tokens=8, sampling=GREEDY), verifier="rrs_wor")
    assert dev._static is None


def test_sizes_are_checked():
    target = tiny_lm(0, vocab=16, dtype=torch.float32, layers=4)
    head = EagleDrafter.random(target, draft_vocab=DRAFT_VOCAB).head
    ids = head.target_ids()
    with pytest.raises(ValueError, match="exceeds the 21 candidates"):
        StaticTreeDraft(head, ids, max_len=32, gamma=3, children=3, width=3, budget=22)
    with pytest.raises(ValueError, match="width <= children"):
        StaticTreeDraft(head, ids, max_len=32, gamma=3, children=2, width=3, budget=4)
    with pytest.raises(ValueError, match="max_len must be an integer"):
        EagleDrafter.random(target, draft_vocab=DRAFT_VOCAB).use_static_cache(0)


def test_generate_with_graphs_drafts_eagle_trees_over_the_static_cache(monkeypatch):
    """``specot.generate(cuda_graphs=True)`` (run eagerly off CUDA) hands the EAGLE drafter a static
    cache: its temperature-0 trees come from the static builder, and greedy output equals the
    autoregressive baseline; at T = 1 the builder is not used."""
    import specot

    target = tiny_lm(0, vocab=16, dtype=torch.float32, layers=4)
    drafter = EagleDrafter.random(target, draft_vocab=DRAFT_VOCAB, seed=2, scale=5.0)
    calls = []
    orig = StaticTreeDraft.draft
    monkeypatch.setattr(StaticTreeDraft, "draft", lambda self, *a, **k: calls.append(a[3]) or orig(self, *a, **k))
    kw = dict(target=target, draft=drafter, max_new_tokens=20, n=3, gamma=3, tree="greedy", verifier="greedy",
              cuda_graphs=True, baseline=True)
    rep = specot.generate(PROMPT, temperature=0.0, **kw)
    assert len(calls) > 3 and rep.result.tokens == rep.baseline.tokens and rep.cuda_graphs
    assert drafter._static_len is not None and drafter._static.graphs is None  # no graphs off CUDA
    calls.clear()
    specot.generate(PROMPT, temperature=1.0, seed=3, **kw)
    assert not calls


def test_the_hybrid_drafter_gets_the_same_trees_when_eagle_skips_iterations():
    """``suffix+eagle``: where the suffix tree wins, the EAGLE drafter skips the iteration, and its
    next catch-up covers several iterations' tokens (wider than a padded width at times); the trees
    and the output stay the host construction's."""
    from specot.drafting import HybridDrafter, SuffixDrafter

    target = tiny_lm(0, vocab=16, dtype=torch.float32, layers=4)
    spec = TreeSpec.prefix([3, 3, 3, 3], "greedy")
    prompt = [1, 5, 3, 7, 2, 9, 1, 5, 3, 7, 2, 9, 1, 5, 3]  # repeats: the suffix tree competes
    runs = []
    for static in (False, True):
        eagle = _drafter(target, children=3, total_tokens=10)
        if static:
            eagle.use_static_cache(96)
        hyb = HybridDrafter(SuffixDrafter(vocab_size=16), eagle)
        res = tree_generate(target, hyb, prompt, spec, GenerationConfig(max_new_tokens=40, sampling=GREEDY),
                            verifier="greedy")
        runs.append((res.tokens, eagle.seen, list(hyb.choices)))
    assert runs[0] == runs[1]
    assert "suffix" in runs[0][2] and "model" in runs[0][2]


class _ReplayedGraph:
    """A CUDA graph's semantics on a CPU: ``replay()`` recomputes the captured function and writes
    its results INTO the outputs returned at capture (a graph's outputs are fixed buffers)."""

    def __init__(self, fn):
        self.fn, self.out = fn, fn()
        self.replays = 0

    def replay(self):
        new = self.fn()
        for a, b in zip(self.out if isinstance(self.out, tuple) else (self.out,), new if isinstance(new, tuple) else (new,)):
            a.copy_(b)
        self.replays += 1


def test_replayed_graphs_read_their_static_inputs_and_outputs(monkeypatch):
    """With graph semantics (a replay overwrites the capture's outputs, inputs must be copied into
    the capture's buffers first), every catch-up width and the expansion are captured once and
    replayed, and the trees stay the host construction's: nothing is read from a fresh tensor where
    a graph's fixed buffer is meant."""
    graphs = []

    def capture(self, fn):
        g = _ReplayedGraph(fn)
        graphs.append(g)
        return g, g.out

    monkeypatch.setattr(StaticTreeDraft, "_capture", capture)
    target = tiny_lm(0, vocab=16, dtype=torch.float32, layers=4)
    spec = TreeSpec.prefix([3, 3, 3, 3], "greedy")
    host, dev = _drafter(target, children=3, total_tokens=10), _drafter(target, children=3, total_tokens=10)
    dev.use_static_cache(64, cuda_graphs=True)
    dev.start(PROMPT, spec, None, frozenset(target.eos_token_ids))
    dev._static_tree(spec, GREEDY, len(PROMPT))
    dev._static.graphs = {}  # as on CUDA
    assert _decode(target, host, spec, n=40).tokens == _decode(target, dev, spec, n=40).tokens
    assert host.seen == dev.seen
    keys = set(dev._static.graphs)
    assert ("expand", 4) in keys and any(k[0] == "catch_up" for k in keys) and len(graphs) == len(keys)
    assert sum(g.replays for g in graphs) >= len(dev.seen) - 1
