"""The one decoding loop: a chain, a tree, an n-gram chain and no draft all run through
``specot.engine.decode``; their statistics add up; the drafter protocol sees consistent outcomes
(committed tokens, accepted path, the target's hidden states at the right positions)."""

from __future__ import annotations

import pytest
import torch

from specot.drafting import DraftOutcome, DraftTree, ModelDrafter, NGramDrafter, TreeSpec
from specot.drafting.base import greedy_q
from specot.engine import GenerationConfig, decode, make_generator, speculative_generate, verify_draft_tree
from specot.laws import DraftLaw
from specot.models import CausalLM
from specot.engine import loop
from specot.sampling import SamplingConfig, standardize
from specot.verifiers import get_verifier

from model_helpers import tiny_lm
from engine_helpers import chi_square_pvalue

PROMPT = [1, 5, 3, 7, 1, 5]


class RecordingDrafter(ModelDrafter):
    """A model drafter that records every outcome and asks for the target's hidden states."""

    hidden_layers = (0, 2)  # embeddings and the last layer of the 2-layer tiny Llama

    def __init__(self, model):
        super().__init__(model)
        self.outcomes: list[DraftOutcome] = []

    def update(self, outcome):
        super().update(outcome)
        self.outcomes.append(outcome)


def _check_stats(res, max_new):
    st = res.stats
    assert st.new_tokens == len(res.tokens) == max_new
    assert st.iterations == st.target_calls == len(st.tree_sizes) == len(st.accepted_lengths)
    assert st.drafted == sum(st.tree_sizes) and st.accepted == sum(st.accepted_lengths)
    assert sum(st.accepted_at) == st.accepted  # every accepted draft is counted at its depth once
    assert all(a <= t for a, t in zip(st.accepted_at, st.tried_at))
    # every iteration commits its accepted drafts + one token (the last may be cut at max_new_tokens)
    assert st.accepted + st.iterations >= st.new_tokens
    assert 0 <= st.overhead_share < 1 and st.total_time_s >= st.target_time_s + st.draft_time_s - 1e-9
    d = st.to_dict()
    assert d["block_efficiency"] == pytest.approx(st.new_tokens / st.target_calls)
    assert d["mean_tree_size"] == pytest.approx(st.drafted / st.iterations)


CASES = {
    "chain": (TreeSpec.sequences(1, 3), "speculative"),
    "tree": (TreeSpec.prefix([2, 2, 1]), "kseq"),
    "wor tree": (TreeSpec.sequences(3, 2, "wor"), "rrs_wor"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_loop_runs_chains_trees_and_reports_hidden_states(case, temperature):
    spec, ver = CASES[case]
    target = tiny_lm(0, dtype=torch.float32)
    drafter = RecordingDrafter(tiny_lm(1, dtype=torch.float32))
    cfg = GenerationConfig(max_new_tokens=20, sampling=SamplingConfig(temperature), seed=3)
    res = decode(target, drafter, PROMPT, cfg, shape=spec, verifier=get_verifier(ver))
    _check_stats(res, 20)
    seq = PROMPT + res.tokens
    n = len(PROMPT)
    H = target.model.config.hidden_size
    for o in drafter.outcomes:
        assert o.context_len == n and list(o.tokens) == seq[n:n + len(o.tokens)]
        assert [o.tree.tokens[i] for i in o.path] == list(o.tokens[:len(o.path)])
        assert o.hidden_states is not None and o.hidden_states.shape[1] == 2 * H
        assert o.hidden_start + o.hidden_states.shape[0] == n + len(o.path)  # up to the accepted drafts
        # the embedding half of the features is the target's embedding of the committed tokens
        ids = torch.tensor(seq[o.hidden_start:n + len(o.path)])
        emb = target.model.get_input_embeddings()(ids)
        torch.testing.assert_close(o.hidden_states[:, :H], emb)
        n += len(o.tokens)
    if temperature == 0.0:  # greedy: identical to autoregressive decoding (float32)
        ar = decode(target, None, PROMPT, cfg, shape=None, verifier=get_verifier("speculative"), method="autoregressive")
        assert ar.tokens == res.tokens and ar.stats.drafted == 0 and ar.stats.target_calls == 20


def test_ngram_chain_and_no_draft_through_the_same_loop():
    target = tiny_lm(0, dtype=torch.float32)
    cfg = GenerationConfig(max_new_tokens=16, sampling=SamplingConfig(0.0), seed=0)
    ng = decode(target, NGramDrafter(n=2), PROMPT, cfg, shape=TreeSpec.sequences(1, 4),
                verifier=get_verifier("speculative"))
    ar = decode(target, None, PROMPT, cfg, shape=None, verifier=get_verifier("speculative"))
    assert ng.tokens == ar.tokens
    _check_stats(ng, 16)
    _check_stats(ar, 16)
    assert ar.stats.iterations == 16 and ar.stats.draft_calls == 0


def test_verify_draft_tree_walks_the_accepted_path():
    """A crafted tree and one-hot target rows: the walk must follow the target's tokens."""
    V = 6
    tree = DraftTree.root(0)
    tree.law = DraftLaw.WOR
    a, b = tree.add_children(0, [2, 3])  # nodes 1, 2
    (c,) = tree.add_children(a, [4])  # node 3, child of token 2
    q = torch.full((2, V), 1.0 / V, dtype=torch.float64)
    tree.q, tree.q_row = q, {0: 0, a: 1}
    logits = torch.full((4, V), -1e9, dtype=torch.float64)
    logits[0, 2] = logits[a, 4] = logits[b, 1] = logits[c, 5] = 0.0  # p: root→2, 2→4, 3→1, 4→5
    step = verify_draft_tree(tree, logits, SamplingConfig(1.0), get_verifier("rrs_wor"), make_generator(0))
    assert step.path == [a, c] and step.emitted == [2, 4, 5] and step.accepted_at_depth == [True, True]


def test_generator_on_another_device_or_of_another_type_is_refused():
    target = tiny_lm(0)
    cfg = GenerationConfig(max_new_tokens=3)
    with pytest.raises(TypeError, match="torch.Generator"):
        decode(target, None, PROMPT, cfg, shape=None, verifier=get_verifier("speculative"), generator=123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seed"):
        make_generator("7")  # type: ignore[arg-type]
    assert make_generator(0, target.device).device == target.device


def test_draft_and_target_sharing_a_wrapper_is_refused():
    target = tiny_lm(0)
    with pytest.raises(ValueError, match="share a KV cache"):
        speculative_generate(target, ModelDrafter(target), PROMPT, GenerationConfig(max_new_tokens=3))
    speculative_generate(target, ModelDrafter(CausalLM(target.model, name="self")), PROMPT,
                         GenerationConfig(max_new_tokens=3))


def _random_tree(rng: torch.Generator, V: int, depth: int, width: int) -> DraftTree:
    tree = DraftTree.root(0)
    frontier = [0]
    for _ in range(depth):
        nxt = []
        for node in frontier:
            toks = torch.randperm(V, generator=rng)[:width].tolist()
            nxt += tree.add_children(node, toks)
        frontier = nxt
    return tree


@pytest.mark.parametrize("verifier,width", [("speculative", 1), ("greedy", 1), ("greedy", 3)])
def test_greedy_shortcut_equals_the_verifiers_own_run(verifier, width):
    """At T = 0 the loop verifies with one argmax per node when the verifier's rule there is
    'accept iff the draft is the argmax'; the tokens, path and per-depth acceptances equal the
    verifier's own run on the one-hot p, over many random trees and logits with ties (bf16)."""
    V = 6
    rng = torch.Generator().manual_seed(0)
    ver = get_verifier(verifier)
    greedy = SamplingConfig(temperature=0.0)
    shortcut = 0
    for _ in range(300):
        tree = _random_tree(rng, V, depth=3, width=width)
        if width > 1:  # the greedy law's q: strictly decreasing over the children
            tree.law = DraftLaw.GREEDY
            rows = []
            for node in sorted(tree.drafts):
                tree.q_row[node] = len(rows)
                q = torch.zeros(V)
                q[tree.drafts[node]] = torch.tensor([0.5, 0.3, 0.2])
                rows.append(q)
            tree.q = torch.stack(rows)
        logits = torch.randint(0, 3, (tree.size + 1, V), generator=rng).to(torch.bfloat16)  # many ties
        fast = verify_draft_tree(tree, logits, greedy, ver, make_generator(1))
        slow = loop._verify(tree, standardize(logits, greedy), ver, make_generator(1))
        assert (fast.emitted, fast.path, fast.accepted_at_depth) == (slow.emitted, slow.path, slow.accepted_at_depth)
        shortcut += len(fast.path)
    assert shortcut > 50  # drafts were accepted, not only rejected


def test_greedy_shortcut_is_not_taken_for_other_verifiers_and_bad_logits_still_raise():
    assert not get_verifier("kseq").argmax_at_temperature_0  # k-Seq may reject the argmax at T = 0
    assert loop._verify_argmax(DraftTree.chain(0, [1]), torch.tensor([[0.0, float("nan")], [1.0, 0.0]])) is None
    with pytest.raises(ValueError, match="NaN"):
        verify_draft_tree(DraftTree.chain(0, [1]), torch.tensor([[0.0, float("nan")], [1.0, 0.0]]),
                          SamplingConfig(temperature=0.0), get_verifier("speculative"), make_generator(0))


def _deterministic_tree() -> DraftTree:
    """root → {2, 3}; 2 → {4, 0}; 4 → {1}: a GREEDY-law tree with q on the children only."""
    tree = DraftTree.root(0)
    a, _ = tree.add_children(0, [2, 3])
    c, _ = tree.add_children(a, [4, 0])
    tree.add_children(c, [1])
    tree.law, tree.deterministic = DraftLaw.GREEDY, True
    tree.q = greedy_q(tree, [(0, [0.6, 0.4]), (a, [0.7, 0.3]), (c, [1.0])], 5)
    tree.q_row = {0: 0, a: 1, c: 2}
    return tree


def _exact_emitted_law(tree: DraftTree, p: torch.Tensor, ver=None) -> dict[tuple[int, ...], float]:
    """P(emitted tokens) by enumeration: at each node the target's token follows p, or with ``ver``
    at each expanded node the verifier's exact output law given the node's drafts (valid for a
    verifier whose token is one of the drafts exactly when it accepts, as ``greedy``); the walk goes
    on while the token is a child."""
    out: dict[tuple[int, ...], float] = {}

    def go(node, prefix, mass):
        law = p[node]
        if ver is not None and node in tree.drafts:
            row = tree.q_row[node]
            law = ver.output_distribution(p[node:node + 1], tree.q[row:row + 1], torch.tensor([tree.drafts[node]]))[0]
        for t in range(p.shape[-1]):
            m = mass * float(law[t])
            child = tree.child_of.get(node, {}).get(t)
            if child is None:
                out[prefix + (t,)] = out.get(prefix + (t,), 0.0) + m
            else:
                go(child, prefix + (t,), m)

    go(0, (), 1.0)
    return out


@pytest.mark.slow
def test_deterministic_tree_shortcut_has_the_verifiers_exact_law():
    """A deterministic tree is verified by one draw from p per node; the emitted sequences follow
    the exact law (enumerated) — as does the greedy verifier's own run on the same tree. Seeded
    chi-square, 4000 draws each, false-failure rate 1e-4 per check."""
    tree = _deterministic_tree()
    logits = torch.randn(tree.size + 1, 5, generator=torch.Generator().manual_seed(3))
    cfg = SamplingConfig(1.0)
    p = standardize(logits, cfg)
    exact = _exact_emitted_law(tree, p)
    assert sum(exact.values()) == pytest.approx(1.0)
    ver = get_verifier("greedy")
    g1, g2 = make_generator(11), make_generator(12)
    fast = [tuple(verify_draft_tree(tree, logits, cfg, ver, g1).emitted) for _ in range(4000)]
    slow = [tuple(loop._verify(tree, p, ver, g2).emitted) for _ in range(4000)]
    assert chi_square_pvalue(fast, exact) > 1e-4
    assert chi_square_pvalue(slow, exact) > 1e-4
    assert max(len(e) for e in fast) == 4  # the deepest path was walked


def test_deterministic_tree_shortcut_only_for_lossless_verifiers(monkeypatch):
    tree = _deterministic_tree()
    logits = torch.randn(tree.size + 1, 5, generator=torch.Generator().manual_seed(0))
    calls = []
    real = loop._verify_visited  # the verifier's own run on the CPU
    monkeypatch.setattr(loop, "_verify_visited", lambda *a: calls.append(1) or real(*a))
    cfg = SamplingConfig(1.0)
    step = verify_draft_tree(tree, logits, cfg, get_verifier("greedy"), make_generator(0))
    assert calls == [] and step.emitted[-1] in range(5)
    tree.deterministic = False
    verify_draft_tree(tree, logits, cfg, get_verifier("greedy"), make_generator(0))
    assert calls == [1]
    tree.deterministic = True
    lossy = get_verifier("greedy")
    monkeypatch.setattr(type(lossy), "lossless", property(lambda self: False))
    verify_draft_tree(tree, logits, cfg, lossy, make_generator(0))
    assert calls == [1, 1]


def _sampled_greedy_tree() -> DraftTree:
    """root → {2 (q's top token), 3 (sampled)}; 2 → {4, 0}; 4 → {1}: a GREEDY-law tree whose last
    child at each node was drawn from q, so it is verified by the ``greedy`` verifier, not by draws
    from p alone."""
    tree = DraftTree.root(0)
    a, _ = tree.add_children(0, [2, 3])
    c, _ = tree.add_children(a, [4, 0])
    tree.add_children(c, [1])
    tree.law = DraftLaw.GREEDY
    tree.q = torch.tensor([[0.1, 0.1, 0.4, 0.3, 0.1], [0.2, 0.1, 0.1, 0.1, 0.5], [0.1, 0.6, 0.1, 0.1, 0.1]],
                          dtype=torch.float64)
    tree.q_row = {0: 0, a: 1, c: 2}
    return tree


@pytest.mark.slow
def test_verifying_the_visited_nodes_has_the_batched_verifiers_exact_law(monkeypatch):
    """On the CPU a tree is verified at its visited nodes only (``_verify_visited``); elsewhere
    every expanded node at once (``_verify``). Both give the enumerated law of the emitted tokens.
    Seeded chi-square, 4000 draws each, false-failure rate 1e-4 per check."""
    tree = _sampled_greedy_tree()
    logits = torch.randn(tree.size + 1, 5, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    cfg = SamplingConfig(1.0)
    p = standardize(logits, cfg)
    ver = get_verifier("greedy")
    exact = _exact_emitted_law(tree, p, ver)
    assert sum(exact.values()) == pytest.approx(1.0)
    batched = []
    real = loop._verify
    monkeypatch.setattr(loop, "_verify", lambda *a: batched.append(1) or real(*a))
    g1, g2 = make_generator(21), make_generator(22)
    visited = [tuple(verify_draft_tree(tree, logits, cfg, ver, g1).emitted) for _ in range(4000)]
    assert batched == []  # the CPU took the node-by-node walk
    every = [tuple(real(tree, p, ver, g2).emitted) for _ in range(4000)]
    assert chi_square_pvalue(visited, exact) > 1e-4
    assert chi_square_pvalue(every, exact) > 1e-4
    assert max(len(e) for e in visited) == 4  # the deepest path was walked
