"""Suffix decoding: the suffix index, draft trees, their exact verification under the
GREEDY law, and the decoding loop with the suffix drafter on tiny random Llama models."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specot.drafting import DraftOutcome, NGramCounts, NGramTable, SuffixDrafter, SuffixIndex, TreeBudget, TreeSpec
from specot.drafting.base import greedy_q, strict_weights
from specot.engine import GenerationConfig, autoregressive_generate, make_generator, tree_generate
from specot.laws import DraftLaw, enumerate_draft_law, sample_drafts, top_tokens
from specot.sampling import SamplingConfig
from specot.verifiers import GreedyVerifier, get_verifier

from model_helpers import tiny_lm
from engine_helpers import chi_square_pvalue, exact_joint

ALPHA = 1e-4  # significance level of the chi-square tests (seeds fixed: deterministic)
GREEDY_T0 = SamplingConfig(temperature=0.0)


# --------------------------------------------------------------------------- the suffix index
def _brute_occurrences(seq, m, end):
    gram = seq[end - m + 1:end + 1]
    return [j for j in range(m - 1, len(seq)) if seq[j - m + 1:j + 1] == gram]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_index_matches_brute_force_and_is_incremental(seed):
    rng = random.Random(seed)
    seq = [rng.randrange(4) for _ in range(120)]
    whole = SuffixIndex(6, seq)
    inc = SuffixIndex(6)
    for i in range(0, len(seq), 7):  # grown in pieces, as update() does
        inc.extend(seq[i:i + 7])
    assert inc.tokens == whole.tokens == seq
    for end in (len(seq) - 1, 50, 10, 3):
        for m in range(1, 8):
            want = _brute_occurrences(seq, m, end) if m <= 6 and m <= end + 1 else []
            assert whole.occurrences(m, end) == want
            assert inc.occurrences(m, end) == want
    # longest suffix occurring at least twice
    want = max((m for m in range(1, 7) if len(_brute_occurrences(seq, m, len(seq) - 1)) >= 2), default=0)
    assert whole.longest_match() == want


def test_index_update_cost_is_max_n_per_token():
    """Each appended token is filed under exactly min(i + 1, max_n) m-grams: O(max_n) per token."""
    idx = SuffixIndex(5)

    def stored(node):
        return len(node.pos) + sum(stored(k) for k in node.kids.values())

    for i, t in enumerate([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9]):
        before = stored(idx._root)
        idx.extend([t])
        assert stored(idx._root) - before == min(i + 1, 5)
    with pytest.raises(ValueError, match="max_n"):
        SuffixIndex(0)


def _brute_followers(seq, query, min_n, max_n, max_occ):
    """The longest suffix of ``query`` (min_n..max_n tokens) with an occurrence in ``seq`` that has a
    successor, and the successors of its most recent ``max_occ`` occurrences."""
    for m in range(min(max_n, len(query)), min_n - 1, -1):
        gram = list(query[len(query) - m:])
        ends = [j for j in range(m - 1, len(seq) - 1) if seq[j - m + 1:j + 1] == gram]
        if ends:
            return m, [seq[j + 1] for j in ends[-max_occ:]]
    return 0, []


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_followers_of_a_query_match_brute_force(seed):
    """What followed the longest repeat of a query: queries inside the sequence (the committed
    context) and past its end (a draft path), every ``min_n``; the last token's own occurrence has
    no successor."""
    rng = random.Random(seed)
    seq = [rng.randrange(3 + seed) for _ in range(80)]
    idx = SuffixIndex(5, seq)
    for _ in range(60):
        cut = rng.randrange(1, len(seq) + 1)
        query = seq[:cut] + [rng.randrange(3 + seed) for _ in range(rng.randrange(4))]
        for min_n in (1, 2, 3):
            assert idx.followers(query, min_n, max_occurrences=6) == _brute_followers(seq, query, min_n, 5, 6)
    # crafted: "1 2" ends at 1, 6, 10 and (itself, no successor yet) 16; "7 1 2" only at 16
    ctx = SuffixIndex(8, CTX)
    assert ctx.followers(CTX) == (2, [3, 5, 3])
    assert ctx.followers(CTX, max_occurrences=1) == (2, [3])
    assert ctx.followers(CTX, min_n=3) == (0, [])
    assert ctx.followers([9, 9]) == (0, []) and ctx.followers([]) == (0, [])
    assert ctx.followers(CTX + [3]) == (3, [4, 6])  # a draft path: "1 2 3" is the longest repeat


def test_sync_extends_or_rebuilds():
    idx = SuffixIndex(4, [1, 2, 3])
    assert idx.sync([1, 2, 3, 4, 5]) is idx and idx.tokens == [1, 2, 3, 4, 5]
    other = idx.sync([7, 8])  # another generation
    assert other is not idx and other.tokens == [7, 8] and other.followers([7]) == (1, [8])


# --------------------------------------------------------------------------- trees
# "1 2" occurred three times, followed by 3 (twice: 3 4 and 3 6) and by 5
CTX = [1, 2, 3, 4, 0, 1, 2, 5, 0, 1, 2, 3, 6, 0, 7, 1, 2]


def _drafter(**kw):
    d = SuffixDrafter(vocab_size=8, **kw)
    d.start(CTX, TreeSpec.sequences(4, 4, DraftLaw.GREEDY))
    return d


def _check_tree_invariants(tree, V, width=None):
    for i in range(1, len(tree.tokens)):
        assert tree.parents[i] < i and tree.depths[i] == tree.depths[tree.parents[i]] + 1
    assert tree.law == DraftLaw.GREEDY
    if tree.q is None:  # a chain: deterministic, its q one-hot rows left implicit
        assert tree.deterministic and all(len(d) == 1 for d in tree.drafts.values())
        return
    for node, drafts in tree.drafts.items():
        n = len(drafts)
        assert len(set(drafts)) == n  # distinct children
        if width is not None:
            assert n <= width
        q = tree.q[tree.q_row[node]].double()
        assert abs(float(q.sum()) - 1.0) < 1e-6
        assert set(torch.nonzero(q).flatten().tolist()) == set(drafts)  # q lives on the children only
        vals = [float(q[t]) for t in drafts]
        assert all(a > b for a, b in zip(vals, vals[1:]))  # strictly decreasing in draft order
        assert top_tokens(q[None], n - 1)[0].tolist() == drafts[:n - 1]
        # the drafts ARE the (deterministic) GREEDY-law draw from q
        tuples, probs = enumerate_draft_law(q, n, DraftLaw.GREEDY)
        assert tuples.shape[0] == 1 and tuples[0].tolist() == drafts and abs(float(probs[0]) - 1.0) < 1e-12
        assert sample_drafts(q[None].float(), n, DraftLaw.GREEDY)[0].tolist() == drafts


def test_tree_merges_occurrences_and_orders_by_frequency():
    d = _drafter(adaptive=False, min_score=0.0)
    tree = d.propose(CTX, 4, SamplingConfig(1.0))
    assert tree.drafts[0] == [3, 5]  # "1 2 3" twice, "1 2 5" once: shared prefix 3 merged
    n3 = tree.child_of[0][3]
    assert sorted(tree.drafts[n3]) == [4, 6]
    assert tree.path_tokens(tree.child_of[n3][4]) == [3, 4]
    _check_tree_invariants(tree, 8)
    assert tree.depth <= 4


def test_tree_budget_width_and_depth():
    for budget in (1, 2, 3, 5):
        d = _drafter(adaptive=False, min_score=0.0, max_nodes=budget)
        tree = d.propose(CTX, 4, SamplingConfig(1.0))
        assert tree.size == budget
        _check_tree_invariants(tree, 8)
    d = _drafter(adaptive=False, min_score=0.0, children=1)
    tree = d.propose(CTX, 4, SamplingConfig(1.0))
    assert tree.is_chain() and tree.tokens[1] == 3  # width 1: the most frequent continuation
    d = _drafter(adaptive=False, min_score=0.0)
    assert d.propose(CTX, 2, SamplingConfig(1.0)).depth == 2  # gamma cuts the tree
    # the spec's widest node caps the width
    d = SuffixDrafter(vocab_size=8, adaptive=False, min_score=0.0)
    d.start(CTX, TreeSpec.sequences(1, 4, DraftLaw.GREEDY))
    assert d.propose(CTX, 4, SamplingConfig(1.0)).is_chain()
    # best-first by score: 3 (8/12 · 2/2.5 = 0.53), 5 (4/12 · 1/1.5 = 0.22), then 3→4 and 3→6 (0.53 · 1/3)
    d = _drafter(adaptive=False, min_score=0.0, max_nodes=2)
    assert d.propose(CTX, 4, SamplingConfig(1.0)).drafts == {0: [3, 5]}
    d = _drafter(adaptive=False, min_score=0.0, max_nodes=3)
    tree = d.propose(CTX, 4, SamplingConfig(1.0))
    assert tree.drafts == {0: [3, 5], tree.child_of[0][3]: [4]}
    d = _drafter(adaptive=False, min_score=0.2)  # the score floor drops 3→4 and 3→6
    assert d.propose(CTX, 4, SamplingConfig(1.0)).drafts == {0: [3, 5]}


def test_no_match_gives_the_empty_tree_and_no_vocab_gives_a_chain():
    d = SuffixDrafter(vocab_size=8)
    d.start([1, 2, 3], TreeSpec.sequences(4, 4, DraftLaw.GREEDY))
    assert d.propose([1, 2, 3], 4, SamplingConfig(1.0)).size == 0
    d = SuffixDrafter(vocab_size=None, adaptive=False, min_score=0.0)
    d.start(CTX, TreeSpec.sequences(4, 4, DraftLaw.GREEDY))
    tree = d.propose(CTX, 4, SamplingConfig(1.0))
    assert tree.is_chain() and tree.q is None and tree.tokens[1:3] == [3, 4]


def test_stop_tokens_are_never_expanded():
    d = SuffixDrafter(vocab_size=8, adaptive=False, min_score=0.0)
    d.start(CTX, TreeSpec.sequences(4, 4, DraftLaw.GREEDY), stop_tokens=frozenset({0}))
    tree = d.propose(CTX, 4, SamplingConfig(1.0))
    for node in tree.drafts:
        assert tree.tokens[node] != 0 or node == 0


def test_adaptive_budget_grows_with_acceptance_and_shrinks_without():
    def run(accept_all):
        d = SuffixDrafter(vocab_size=8, cost_per_token=0.1)
        d.start(CTX, TreeSpec.sequences(4, 4, DraftLaw.GREEDY))
        ctx = list(CTX)
        for _ in range(12):
            tree = d.propose(ctx, 4, SamplingConfig(1.0))
            path = []
            if accept_all and tree.size:
                node = 0
                while node in tree.drafts:
                    node = tree.child_of[node][tree.drafts[node][0]]
                    path.append(node)
            toks = tuple(tree.tokens[n] for n in path) + (1,)
            d.update(DraftOutcome(tree=tree, path=tuple(path), tokens=toks, context_len=len(ctx)))
            ctx += list(toks)
            # keep the same suffix in play: re-append "1 2"
            d.update(DraftOutcome(tree=DraftTree_root(ctx[-1]), path=(), tokens=(2,), context_len=len(ctx)))
            ctx.append(2)
        return d

    hi, lo = run(True), run(False)
    assert hi.calibration > 1.0 > lo.calibration
    assert sum(hi.budgets[-4:]) > sum(lo.budgets[-4:])


def DraftTree_root(tok):
    from specot.drafting import DraftTree

    return DraftTree.root(tok)


def test_corpus_is_gated_by_match_length():
    table = NGramTable.from_token_sequences([[0, 40, 41]], n=2)  # (40,) → 41 and (0, 40) → 41
    for min_n, want in ((1, 1), (2, 0)):
        d = SuffixDrafter(vocab_size=64, corpus=table, corpus_min_n=min_n)
        d.start([5, 40], TreeSpec.sequences(4, 4, DraftLaw.GREEDY))
        tree = d.propose([5, 40], 4, SamplingConfig(1.0))  # 40 never occurred before: no context match
        assert tree.size == want and (want == 0 or tree.tokens[1] == 41)


def _counts_by_brute_force(seqs, n, top):
    table = {}
    for m in range(1, n + 1):
        grams = Counter(tuple(s[i - m:i + 1]) for s in seqs for i in range(m, len(s)))
        for ctx in {g[:-1] for g in grams}:
            nxt = sorted(((g[-1], k) for g, k in grams.items() if g[:-1] == ctx), key=lambda tk: (-tk[1], tk[0]))
            total = sum(k for _, k in nxt)
            table[ctx] = [(t, k / total) for t, k in nxt[:top]]
    return table


@settings(max_examples=150, deadline=None)
@given(seqs=st.lists(st.lists(st.integers(0, 6), max_size=12), max_size=6), n=st.integers(1, 3),
       top=st.integers(1, 4), big=st.booleans())
def test_ngram_counts_equal_brute_force(seqs, n, top, big):
    """The packed-tensor count equals counting every m-gram in Python; ``big`` ids (past what packs
    into one int64) take the Python count."""
    if big:
        seqs = [[t * 10**6 for t in s] for s in seqs]
    assert NGramCounts.from_token_sequences(seqs, n=n, top=top).table == _counts_by_brute_force(seqs, n, top)


def test_ngram_counts_and_corpus_children_join_the_tree():
    counts = NGramCounts.from_token_sequences([[1, 2, 3], [1, 2, 3], [1, 2, 4], [5, 2, 6]], n=2, top=4)
    assert counts.continuations([9, 1, 2]) == [(3, pytest.approx(2 / 3)), (4, pytest.approx(1 / 3))]
    assert counts.continuations([9, 7, 2], min_n=1) == [(3, 0.5), (4, 0.25), (6, 0.25)]  # backs off to (2,)
    assert counts.continuations([9, 7, 2], min_n=2) == []
    with pytest.raises(ValueError):
        NGramCounts.from_token_sequences([[1, 2]], n=0)
    d = SuffixDrafter(vocab_size=16, corpus=counts, adaptive=False, min_score=0.0)
    d.start([7, 1, 2], TreeSpec.sequences(4, 3, DraftLaw.GREEDY))  # no context match: corpus only
    tree = d.propose([7, 1, 2], 3, SamplingConfig(1.0))
    assert tree.drafts[0] == [3, 4]  # frequencies 2/3, 1/3 times the gate
    assert {node for node, _, _ in d._last_corpus} == set(range(1, tree.size + 1))
    # context and corpus continuations merge into one set of children
    ctx = [2, 6, 0, 7, 1, 2]
    d.start(ctx, TreeSpec.sequences(4, 3, DraftLaw.GREEDY))
    assert sorted(d.propose(ctx, 3, SamplingConfig(1.0)).drafts[0]) == [3, 4, 6]


@pytest.mark.parametrize("accept", [True, False])
def test_corpus_is_gated_by_its_measured_acceptance(accept):
    table = NGramTable.from_token_sequences([[t, (t + 1) % 64] for t in range(64)], n=1)  # t → t + 1
    d = SuffixDrafter(vocab_size=64, corpus=table, corpus_min_n=1)
    ctx = [0, 40]
    d.start(ctx, TreeSpec.sequences(4, 4, DraftLaw.GREEDY))
    sizes = []
    for i in range(12):
        tree = d.propose(ctx, 4, SamplingConfig(1.0))
        assert len(d._last_corpus) == tree.size  # every node came from the corpus
        sizes.append(tree.size)
        if accept:  # the whole chain accepted, then a novel token (no context match next time)
            path = tuple(range(1, tree.size + 1))
            toks = tuple(tree.tokens[1:]) + (63 - 2 * i,)
        else:  # rejected at once: a novel token
            path, toks = (), (63 - 2 * i,)
        d.update(DraftOutcome(tree=tree, path=path, tokens=toks, context_len=len(ctx)))
        ctx += list(toks)
    if accept:
        assert d.corpus_gate > 0.7 and sizes[-1] > sizes[0]
    else:
        assert d.corpus_gate < 0.1 and sizes[-1] < sizes[0]


# --------------------------------------------------------------------------- exact verification
def _random_p(V, gen, zeros=0):
    p = torch.rand(V, generator=gen, dtype=torch.float64) ** 3
    if zeros:
        p[torch.randperm(V, generator=gen)[:zeros]] = 0.0
    return p / p.sum()


@pytest.mark.parametrize("V", [2, 3, 6])
def test_greedy_verifier_on_child_q_accepts_p_children_and_outputs_p(V):
    """Exact enumeration: for every set of distinct children (every size n, every order) with q ∝
    scores on the children, the greedy verifier accepts with probability exactly p(children) — the
    optimum α* for deterministic drafts (the emitted token follows p and is accepted only if it is a
    child, so no lossless rule accepts more) — and emits exactly p."""
    import itertools

    gen = torch.Generator().manual_seed(V)
    ver = GreedyVerifier()
    ps = [_random_p(V, gen), _random_p(V, gen, zeros=V // 2), torch.eye(V, dtype=torch.float64)[V - 1]]
    for p in ps:
        for n in range(1, V + 1):
            for children in itertools.permutations(range(V), n):
                scores = sorted((float(torch.rand(1, generator=gen)) for _ in range(n)), reverse=True)
                q = torch.zeros(V, dtype=torch.float64)
                q[list(children)] = torch.tensor(strict_weights(scores), dtype=torch.float64)
                # the drafts are the GREEDY law's only tuple: the law average is this one conditional
                tuples, probs = enumerate_draft_law(q, n, DraftLaw.GREEDY)
                assert tuples.shape[0] == 1 and tuples[0].tolist() == list(children)
                d = torch.tensor([children])
                out = ver.output_distribution(p[None], q[None], d)[0]
                assert torch.allclose(out, p, atol=1e-12, rtol=0)
                acc = float(ver.accept_probability(p[None], q[None], d)[0])
                alpha_star = float(p[list(children)].sum())
                assert abs(acc - alpha_star) < 1e-12
                assert abs(float(ver.acceptance(p[None], q[None], n).value[0]) - alpha_star) < 1e-12


def test_greedy_verifier_sampling_on_child_q():
    """The sampled verify() agrees: emitted frequencies ≈ p, acceptance ≈ p(children)."""
    V, B = 6, 40000
    gen = torch.Generator().manual_seed(5)
    p = _random_p(V, gen)
    children = [4, 1, 2]
    q = torch.zeros(V, dtype=torch.float64)
    q[children] = torch.tensor(strict_weights([0.5, 0.3, 0.2]), dtype=torch.float64)
    out = GreedyVerifier().verify(p.expand(B, V), q.expand(B, V), torch.tensor([children] * B), gen)
    freq = torch.bincount(out.tokens, minlength=V).double() / B
    assert torch.allclose(freq, p, atol=4 * (0.25 / B) ** 0.5)
    acc = float(out.accepted.double().mean())
    assert abs(acc - float(p[children].sum())) < 4 * (0.25 / B) ** 0.5
    # accepted index points at the emitted child
    ok = out.accepted_index >= 0
    assert torch.equal(torch.tensor(children)[out.accepted_index[ok]], out.tokens[ok])
    assert bool((~ok).logical_and(torch.isin(out.tokens, torch.tensor(children))).logical_not().all())


def test_drafter_q_rows_are_verifiable_by_greedy():
    d = _drafter(adaptive=False, min_score=0.0)
    tree = d.propose(CTX, 4, SamplingConfig(1.0))
    gen = torch.Generator().manual_seed(0)
    for node, drafts in tree.drafts.items():
        q = tree.q[tree.q_row[node]].double()
        p = _random_p(8, gen)
        dd = torch.tensor([drafts])
        assert torch.allclose(GreedyVerifier().output_distribution(p[None], q[None], dd)[0], p, atol=1e-12, rtol=0)
        assert abs(float(GreedyVerifier().accept_probability(p[None], q[None], dd)[0]) - float(p[drafts].sum())) < 1e-12


# --------------------------------------------------------------------------- decoding
PROMPTS = [
    [1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2],
    [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5],
    [7, 7, 7, 7, 7],
]


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize("schedule", ["constant", "heuristic"])
def test_greedy_identical_to_autoregressive(prompt, gamma, schedule):
    target = tiny_lm(0, vocab=16, dtype=torch.float32)
    cfg = GenerationConfig(max_new_tokens=40, sampling=GREEDY_T0, gamma_schedule=schedule)
    ar = autoregressive_generate(target, prompt, cfg)
    drafter = SuffixDrafter(vocab_size=16)
    sd = tree_generate(target, drafter, prompt, TreeSpec.sequences(4, gamma, DraftLaw.GREEDY), cfg, verifier="greedy")
    assert sd.tokens == ar.tokens and len(sd.tokens) == 40
    assert sd.stats.accepted > 0


def test_statistics_add_up():
    target = tiny_lm(0, vocab=16, dtype=torch.float32)
    drafter = SuffixDrafter(vocab_size=16)
    for temp in (0.0, 1.0):
        cfg = GenerationConfig(max_new_tokens=50, sampling=SamplingConfig(temp), seed=1, stop_at_eos=False)
        res = tree_generate(target, drafter, PROMPTS[1], TreeSpec.sequences(4, 4, DraftLaw.GREEDY), cfg)
        st = res.stats
        assert st.new_tokens == len(res.tokens) == 50
        assert st.iterations == st.target_calls == len(st.tree_sizes)
        # the last pass has no draft when one token is left (the engine does not call propose)
        assert drafter.calls == len(drafter.budgets) == st.draft_calls and st.iterations - drafter.calls in (0, 1)
        assert st.tree_sizes[:drafter.calls] == drafter.budgets
        assert st.drafted == sum(st.tree_sizes) and st.accepted == sum(st.accepted_lengths)
        assert st.new_tokens == st.accepted + st.iterations  # accepted drafts + one token per pass
        assert st.block_efficiency == pytest.approx(st.new_tokens / st.target_calls)
        assert all(a <= d for a, d in zip(st.accepted_lengths, st.tree_sizes))
        assert max(st.tree_sizes) <= drafter.max_nodes
        assert drafter.index.tokens == PROMPTS[1] + res.tokens  # indexed incrementally by update()


def test_default_verifier_for_a_suffix_spec_is_greedy():
    assert TreeSpec.sequences(4, 4, DraftLaw.GREEDY).default_verifier == "greedy"
    assert TreeBudget(1, 4).default_verifier == "greedy"  # a budget's trees are all its law's
    with pytest.raises(ValueError, match="cannot be verified"):
        TreeSpec.sequences(4, 4, DraftLaw.GREEDY).check_verifier(get_verifier("speculative"))


@pytest.mark.slow
@pytest.mark.parametrize("sampling", [SamplingConfig(1.0), SamplingConfig(0.7, top_k=4)])
def test_sampling_is_lossless_chi_square(sampling):
    """Law of 3-token continuations under suffix trees == the EXACT autoregressive joint."""
    V = 8
    prompt = [1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2, 6, 1, 2]  # "1 2" → 3, 4, 5, 6: a 4-child root
    target = tiny_lm(0, vocab=V, dtype=torch.float32)
    exact = exact_joint(target.model, prompt, 3, sampling)
    gen = make_generator(2024)
    cfg = GenerationConfig(max_new_tokens=3, sampling=sampling, stop_at_eos=False)
    drafter = SuffixDrafter(vocab_size=V, adaptive=False, min_score=0.0, max_nodes=8)
    spec = TreeSpec.sequences(4, 2, DraftLaw.GREEDY)
    samples, widest = [], 0
    for _ in range(1500):
        res = tree_generate(target, drafter, prompt, spec, cfg, generator=gen, verifier="greedy")
        samples.append(tuple(res.tokens))
        widest = max(widest, res.stats.tree_sizes[0])
    assert widest >= 4  # real multi-child trees were verified
    assert chi_square_pvalue(samples, exact) > ALPHA


@pytest.mark.slow
def test_chi_square_detects_a_biased_rule():
    """Power check: always emitting the first child when p gives it any mass is rejected."""
    V = 8
    prompt = [1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2, 6, 1, 2]
    target = tiny_lm(0, vocab=V, dtype=torch.float32)
    sampling = SamplingConfig(1.0)
    exact = exact_joint(target.model, prompt, 1, sampling)
    samples = [(3,)] * 300 + [(t,) for t in range(V) for _ in range(10)]
    assert chi_square_pvalue(samples, exact) < ALPHA


# --------------------------------------------------------------------------- wiring
def test_api_load_drafter_and_generate_with_suffix():
    from specot.api import generate, load_drafter

    target = tiny_lm(0, vocab=16, dtype=torch.float32)
    d = load_drafter("suffix", target)
    assert isinstance(d, SuffixDrafter) and d.vocab_size == target.vocab_size
    prompt = PROMPTS[1]
    rep = generate(prompt, target=target, draft="suffix", temperature=0.0, max_new_tokens=30, gamma=3)
    ar = autoregressive_generate(target, prompt, GenerationConfig(max_new_tokens=30, sampling=GREEDY_T0))
    assert rep.result.tokens == ar.tokens
    assert rep.result.method == "tree" and rep.verifier["name"] == "greedy" and rep.lossless
    rep1 = generate(prompt, target=target, draft="suffix", temperature=1.0, max_new_tokens=20, seed=3, n=2)
    assert len(rep1.result.tokens) == 20
    ng = generate(prompt, target=target, draft="ngram", temperature=0.0, max_new_tokens=30, gamma=3)
    assert ng.result.method == "speculative" and ng.result.tokens == ar.tokens
    with pytest.raises(ValueError, match="suffix drafter"):
        generate(prompt, target=target, draft="suffix", tree="eagle")
    with pytest.raises(ValueError, match="cannot be verified"):
        generate(prompt, target=target, draft="suffix", verifier="kseq")


def test_cli_help_mentions_suffix():
    import argparse

    from specot.cli import generate as cli_gen

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    cli_gen.register(sub)
    assert "'suffix'" in " ".join(sub.choices["generate"].format_help().split())


def test_invalid_parameters():
    with pytest.raises(ValueError, match="max_nodes"):
        SuffixDrafter(vocab_size=8, max_nodes=0)
    with pytest.raises(ValueError, match="min_n"):
        SuffixDrafter(vocab_size=8, max_n=2, min_n=3)
    with pytest.raises(ValueError, match="vocab_size"):
        SuffixDrafter(vocab_size=0)
    q = greedy_q(DraftTree_root(0), [], 8)
    assert q.shape == (0, 8)


def test_cli_generate_with_suffix_draft(tiny_model_dir, capsys):
    import json

    from specot.cli.main import main as cli_main

    args = ["generate", "--target", str(tiny_model_dir), "--prompt", "the cat sat on the mat and the cat sat on the",
            "--raw", "--temperature", "0", "--max-new-tokens", "12", "--ngram-corpus", "none", "--json"]
    assert cli_main(args + ["--draft", "suffix", "--baseline"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verifier"] == "greedy"
    assert out["speculative"]["tokens"] == out["baseline"]["tokens"]
