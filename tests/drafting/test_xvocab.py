"""Cross-vocabulary drafting (TLI, SLEM) is exact: enumeration over two synthetic BPE tokenizers.

The target and the draft are tiny random Llamas over two different vocabularies of the alphabet
{a, b, c}: different merges, tokens that straddle the other side's boundaries ("ca" vs "ab"), tokens
one side lacks ("abc", "bc" / "cab", "bb", "ba"). The law of the first N committed target tokens
of speculative decoding with each algorithm is computed exactly (every draft the drafter can make,
with its probability, and each verifier's exact conditional law) and must equal the target's
autoregressive law to 1e-10; planted defects (drafts drawn from another law than the q handed
over; SLEM verified against the draft's q instead of a point mass; a boundary rule that ignores a
merge across the boundary) make the checks fail.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine_helpers import exact_joint  # noqa: E402
from model_helpers import tiny_llama  # noqa: E402
from verifier_helpers import enumerate_emitted  # noqa: E402

from specot.drafting.xvocab import TokenizerView, XVocabDrafter, intersect_vocabularies  # noqa: E402
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate, tree_generate  # noqa: E402
from specot.drafting.tree import TreeSpec  # noqa: E402
from specot.laws import DraftLaw  # noqa: E402
from specot.models import CausalLM  # noqa: E402
from specot.sampling import SamplingConfig, standardize  # noqa: E402
from specot.verifiers import get_verifier  # noqa: E402

T_VOCAB = ["a", "b", "c", "ab", "bc", "abc", "ca"]
T_MERGES = [("a", "b"), ("b", "c"), ("ab", "c"), ("c", "a")]
D_VOCAB = ["a", "b", "c", "ca", "cab", "bb", "ba"]
D_MERGES = [("c", "a"), ("ca", "b"), ("b", "b"), ("b", "a")]


def bpe(text: str, vocab: list[str], merges: list[tuple[str, str]]) -> list[int]:
    """Byte-pair encoding: merge the lowest-ranked adjacent pair everywhere, until none applies."""
    rank = {m: r for r, m in enumerate(merges)}
    toks = list(text)
    while True:
        ranks = [(rank[(a, b)], i) for i, (a, b) in enumerate(zip(toks, toks[1:])) if (a, b) in rank]
        if not ranks:
            return [vocab.index(t) for t in toks]
        pair = merges[min(ranks)[0]]
        out, i = [], 0
        while i < len(toks):
            if i + 1 < len(toks) and (toks[i], toks[i + 1]) == pair:
                out.append(pair[0] + pair[1])
                i += 2
            else:
                out.append(toks[i])
                i += 1
        toks = out


def view(name: str, vocab: list[str], merges: list[tuple[str, str]]) -> TokenizerView:
    return TokenizerView(name, tuple(v.encode() for v in vocab), frozenset(), lambda s: bpe(s, vocab, merges))


TARGET_VIEW, DRAFT_VIEW = view("target", T_VOCAB, T_MERGES), view("draft", D_VOCAB, D_MERGES)
PROMPT = [T_VOCAB.index("a"), T_VOCAB.index("bc")]  # "abc", not the target's own encoding ["abc"]
N = 3


@pytest.fixture(scope="module")
def models():
    target = CausalLM(tiny_llama(11, vocab=len(T_VOCAB)), name="target")
    draft = CausalLM(tiny_llama(12, vocab=len(D_VOCAB)), name="draft")
    return target, draft


class Process:
    """The exact law of speculative decoding's first ``N`` committed tokens with a chain drafter."""

    def __init__(self, target: CausalLM, sampling: SamplingConfig, verifier: str = "speculative") -> None:
        self.target, self.sampling, self.verifier = target, sampling, get_verifier(verifier)
        self._p: dict[tuple[int, ...], torch.Tensor] = {}

    def p(self, ctx: tuple[int, ...]) -> torch.Tensor:
        if ctx not in self._p:
            with torch.no_grad():  # the float64 model itself (the wrapper returns float32 logits)
                logits = self.target.model(input_ids=torch.tensor([list(ctx)])).logits[:, -1].double()
            self._p[ctx] = standardize(logits, self.sampling)[0]
        return self._p[ctx]

    def block_law(self, ctx: tuple[int, ...], chains) -> dict[tuple[int, ...], float]:
        """``chains``: (probability, chain, q rows or None for one-hot) → law of the committed block."""
        out: dict[tuple[int, ...], float] = defaultdict(float)
        for w, chain, qs in chains:
            alive = w
            for i, d in enumerate(chain):
                p = self.p(ctx + tuple(chain[:i]))
                q = torch.zeros_like(p).index_fill_(0, torch.tensor([d]), 1.0) if qs is None else qs[i].double()
                pi = self.verifier.output_distribution(p[None], q[None], torch.tensor([[d]]))[0]
                for y in range(len(p)):
                    if y != d and pi[y] > 0:
                        out[tuple(chain[:i]) + (y,)] += alive * float(pi[y])
                alive *= float(pi[d])
            p = self.p(ctx + tuple(chain))
            for y in range(len(p)):
                out[tuple(chain) + (y,)] += alive * float(p[y])
        return out

    def law(self, ctx: tuple[int, ...], chains_at, n: int = N) -> dict[tuple[int, ...], float]:
        out: dict[tuple[int, ...], float] = defaultdict(float)
        for block, w in self.block_law(ctx, chains_at(ctx)).items():
            if len(block) >= n:
                out[block[:n]] += w
            else:
                for rest, w2 in self.law(ctx + block, chains_at, n - len(block)).items():
                    out[block + rest] += w * w2
        return out


def tli_chains(drafter: XVocabDrafter, sampling: SamplingConfig, gamma: int, drawn_from=None):
    """Every TLI chain after ``ctx`` with its probability and q rows. ``drawn_from(dctx)`` (planted
    defect): the law the drafts are really drawn from, mapped to target ids, when it is not q."""
    def at(ctx):
        out = []

        def grow(dctx, chain, qs, w):
            if len(chain) == gamma:
                out.append((w, chain, qs))
                return
            q = drafter.tli_q(dctx, sampling).double()
            q = q / q.sum()  # float32 q as the float64 law it stands for
            law = q if drawn_from is None else drawn_from(dctx)
            for t in torch.nonzero(law > 0).flatten().tolist():
                grow(dctx + [int(drafter.vmap.to_draft[t])], chain + [t], qs + [q], w * float(law[t]))
        grow(drafter.draft_context(list(ctx)), [], [], 1.0)
        return out
    return at


def slem_chains(drafter: XVocabDrafter, sampling: SamplingConfig, gamma: int, planted_q: bool = False):
    """Every SLEM chain after ``ctx``: every draft token sequence the draft can sample (length γ +
    drop_last), its probability, and the chain the boundary rule makes of it (one-hot q)."""
    def at(ctx):
        merged: dict[tuple[int, ...], float] = defaultdict(float)

        def grow(dctx, ids, w):
            if len(ids) == gamma + drafter.drop_last:
                merged[tuple(drafter.slem_chain(list(ctx), ids)[:gamma])] += w
                return
            q = standardize(drafter.model.logits_after(dctx).double(), sampling)[0]
            for d in torch.nonzero(q > 0).flatten().tolist():
                grow(dctx + [d], ids + [d], w * float(q[d]))
        grow(drafter.draft_context(list(ctx)), [], 1.0)
        if planted_q:  # the defect: half the draft's restricted q, half the point mass, as q
            tli = XVocabDrafter(drafter.model, DRAFT_VIEW, TARGET_VIEW, "tli")
            cache: dict[tuple[int, ...], torch.Tensor] = {}

            def row(c, i):
                key = tuple(ctx) + tuple(c[:i])
                if key not in cache:
                    cache[key] = tli.tli_q(tli.draft_context(list(key)), sampling).double()
                q = cache[key]
                return 0.5 * q / q.sum() + 0.5 * torch.nn.functional.one_hot(torch.tensor(c[i]), len(q)).double()
            return [(w, list(c), [row(c, i) for i in range(len(c))]) for c, w in merged.items()]
        return [(w, list(c), None) for c, w in merged.items()]
    return at


def max_error(law, target_law) -> float:
    keys = set(law) | set(target_law)
    assert abs(sum(law.values()) - 1.0) < 1e-10
    return max(abs(law.get(k, 0.0) - target_law.get(k, 0.0)) for k in keys)


def string_law(law) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for ids, w in law.items():
        out["".join(T_VOCAB[i] for i in ids)] += w
    return out


SAMPLINGS = [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.6, top_k=5)]


def test_vocabulary_intersection():
    vmap = intersect_vocabularies(DRAFT_VIEW, TARGET_VIEW)
    shared = sorted(D_VOCAB[d] for d in vmap.draft_ids.tolist())
    assert shared == ["a", "b", "c", "ca"]
    for d, t in zip(vmap.draft_ids.tolist(), vmap.target_ids.tolist()):
        assert D_VOCAB[d] == T_VOCAB[t] and int(vmap.to_draft[t]) == d
    assert (vmap.to_draft >= 0).sum() == 4


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["T1", "T0.6-top5"])
def test_tli_chain_law_is_the_target_law(models, sampling):
    target, draft = models
    drafter = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "tli")
    proc = Process(target, sampling)
    want = exact_joint(target.model, PROMPT, N, sampling)
    got = proc.law(tuple(PROMPT), tli_chains(drafter, sampling, gamma=2))
    assert max_error(got, want) < 1e-10
    assert max(abs(a - string_law(want)[s]) for s, a in string_law(got).items()) < 1e-10


def test_tli_planted_wrong_draw_fails(models):
    """Drafts from the draft's FULL q, an unshared token replaced by the first target token of its
    text, verified against the restricted q: not the law the drafts came from, so not exact."""
    target, draft = models
    sampling = SAMPLINGS[0]
    drafter = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "tli")

    def full_law(dctx):
        qd = standardize(draft.logits_after(dctx).double(), sampling)[0]
        out = torch.zeros(len(T_VOCAB), dtype=torch.float64)
        for d, w in enumerate(qd.tolist()):
            out[TARGET_VIEW.encode(D_VOCAB[d])[0]] += w
        return out
    want = exact_joint(target.model, PROMPT, N, sampling)
    got = Process(target, sampling).law(tuple(PROMPT), tli_chains(drafter, sampling, 2, drawn_from=full_law))
    assert max_error(got, want) > 1e-3


@pytest.mark.parametrize("verifier", ["kseq", "rrs", "ot", "importance"])
@pytest.mark.parametrize("n", [2, 3])
def test_tli_multi_draft_iid_is_exact(models, verifier, n):
    """n i.i.d. drafts from TLI's q (zero off the shared tokens, while p is not): the i.i.d.
    verifiers emit exactly p, at several contexts."""
    target, draft = models
    drafter = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "tli")
    ver = get_verifier(verifier)
    for ctx in (PROMPT, PROMPT + [5], [6, 1, 2, 0]):
        p = standardize(target.logits_after(ctx).double(), SAMPLINGS[0])[0]
        q = drafter.tli_q(drafter.draft_context(ctx), SAMPLINGS[0]).double()
        q = q / q.sum()
        assert (q[[3, 4, 5]] == 0).all() and (p[[3, 4, 5]] > 0).all()
        emitted, _ = enumerate_emitted(ver, p, q, n, DraftLaw.IID)
        assert torch.allclose(emitted, p, atol=1e-10, rtol=0)


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["T1", "T0.6-top5"])
@pytest.mark.parametrize("lookbehind,drop_last", [(4, 1), (0, 0), (2, 0)])
def test_slem_chain_law_is_the_target_law(models, sampling, lookbehind, drop_last):
    target, draft = models
    drafter = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "slem", lookbehind=lookbehind, drop_last=drop_last)
    want = exact_joint(target.model, PROMPT, N, sampling)
    got = Process(target, sampling).law(tuple(PROMPT), slem_chains(drafter, sampling, gamma=2))
    assert max_error(got, want) < 1e-10


def test_slem_planted_draft_q_fails(models):
    """SLEM chains verified against a q mixing the draft's restricted q into the point mass: lossy."""
    target, draft = models
    sampling = SAMPLINGS[0]
    drafter = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "slem")
    want = exact_joint(target.model, PROMPT, N, sampling)
    got = Process(target, sampling).law(tuple(PROMPT), slem_chains(drafter, sampling, 2, planted_q=True))
    assert max_error(got, want) > 1e-3


class NaiveBoundary(XVocabDrafter):
    """A wrong boundary rule: the re-encoded window's tokens after the committed tail, taken
    without checking that the window's encoding starts with that tail (a merge across the boundary)."""

    def slem_chain(self, context, draft_ids):
        k = min(self.lookbehind, len(context))
        text = b"".join(self.draft_view.pieces[i] for i in draft_ids).decode()
        enc = self.target_view.encode(self.target_view.text_bytes(context[len(context) - k:]).decode() + text)
        return enc[k:len(enc) - self.drop_last]


def boundary_violations(drafter: XVocabDrafter) -> list[tuple]:
    """(context, drafts) where the committed text + the chain's text is not a prefix of the
    committed text + the drafted text: every context and draft of up to 3 tokens."""
    bad = []
    ctxs = [[]] + [[a] for a in range(7)] + [[a, b] for a in range(7) for b in range(7)]
    drafts = [[a, b, c] for a in range(7) for b in range(7) for c in range(7)]
    for ctx in ctxs:
        for ids in drafts:
            chain = drafter.slem_chain(ctx, ids)
            base = TARGET_VIEW.text_bytes(ctx)
            if not (base + DRAFT_VIEW.text_bytes(ids)).startswith(base + TARGET_VIEW.text_bytes(chain)):
                bad.append((ctx, ids, chain))
    return bad


def test_slem_boundary_rule_keeps_the_text(models):
    drafter = XVocabDrafter(models[1], DRAFT_VIEW, TARGET_VIEW, "slem", lookbehind=3, drop_last=0)
    assert boundary_violations(drafter) == []
    # the boundary: committed "ab" + drafted "c" re-encodes as "abc" -> not after ["ab"]: "c" on its own
    assert drafter.slem_chain([3], [2]) == [2]
    # a committed tail that re-encodes to itself: what follows it is the target's own encoding
    assert drafter.slem_chain([0], [5, 1]) == bpe("bbb", T_VOCAB, T_MERGES)


def test_slem_planted_boundary_rule_fails(models):
    drafter = NaiveBoundary(models[1], DRAFT_VIEW, TARGET_VIEW, "slem", lookbehind=3, drop_last=0)
    assert boundary_violations(drafter)


def test_proposals_are_the_enumerated_ones(models):
    """What propose() drafts is what the enumeration enumerates: TLI's q rows are tli_q at the
    drafted prefixes (draws in their support); SLEM's chain is slem_chain of its draft tokens."""
    target, draft = models
    sampling = SAMPLINGS[0]
    tli = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "tli")
    slem = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "slem")
    gen = torch.Generator().manual_seed(3)
    for _ in range(5):
        tree = tli.propose(PROMPT, 3, sampling, gen)
        chain = tree.path_tokens(tree.size)
        assert tree.tokens[0] == PROMPT[-1] and len(chain) == 3
        dctx = tli.draft_context(PROMPT)
        for i, t in enumerate(chain):
            q = tli.tli_q(dctx, sampling)
            assert torch.allclose(tree.q[tree.q_row[i]], q, atol=1e-12) and q[t] > 0
            dctx = dctx + [int(tli.vmap.to_draft[t])]
        tree = slem.propose(PROMPT, 3, sampling, gen)
        assert tree.deterministic and tree.q is None
        assert tree.path_tokens(tree.size) == slem.slem_chain(PROMPT, slem.last_draft_ids)[:3]


@pytest.mark.parametrize("mode", ["tli", "slem"])
def test_greedy_equals_target_autoregressive(models, mode):
    target, draft = models
    cfg = GenerationConfig(max_new_tokens=16, gamma=3, sampling=SamplingConfig(temperature=0.0), seed=0)
    want = autoregressive_generate(target, PROMPT, cfg).tokens
    drafter = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, mode)
    got = speculative_generate(target, drafter, PROMPT, cfg)
    assert got.tokens == want
    tree = tree_generate(target, XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "tli"), PROMPT,
                         TreeSpec.sequences(2, 2, law=DraftLaw.IID), cfg)
    assert tree.tokens == want


def test_refusals():
    with pytest.raises(ValueError, match="mode"):
        XVocabDrafter(None, DRAFT_VIEW, TARGET_VIEW, "slrs")
    lone = TokenizerView("x", (b"x", b"y"), frozenset(), lambda s: [0] * len(s))
    with pytest.raises(ValueError, match="share no token"):
        XVocabDrafter(None, lone, TARGET_VIEW, "tli")


def test_a_window_reads_the_prompts_last_tokens_and_stays_exact(models):
    """``window``: the draft reads the prompt's last ``window`` target tokens and then all it commits
    (a function of the context and the prompt's length: greedy still equals autoregressive and the
    SLEM chain law is still the target's); a character begun before the window is dropped."""
    target, draft = models
    prompt = [T_VOCAB.index(t) for t in ("abc", "a", "ca", "b", "c")]  # "abcacabc"
    full = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "slem")
    short = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "slem", window=2)
    spec = TreeSpec.sequences(1, 2)
    for d in (full, short):
        d.start(prompt, spec)
    ctx = prompt + [T_VOCAB.index("a")]
    assert full.draft_context(ctx) == bpe("abcacabca", D_VOCAB, D_MERGES)
    assert short.draft_context(ctx) == bpe("bca", D_VOCAB, D_MERGES)  # "b", "c", then what was committed
    short.start(prompt[:1], spec)  # a prompt shorter than the window: all of it
    assert short.draft_context(prompt[:1]) == bpe("abc", D_VOCAB, D_MERGES)
    cfg = GenerationConfig(max_new_tokens=12, gamma=3, sampling=SamplingConfig(temperature=0.0), seed=0)
    want = autoregressive_generate(target, prompt, cfg).tokens
    assert speculative_generate(target, XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "slem", window=2), prompt,
                                cfg).tokens == want
    sampling = SamplingConfig(temperature=1.0)
    windowed = XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "slem", window=1)
    windowed.start(list(PROMPT), spec)
    got = Process(target, sampling).law(tuple(PROMPT), slem_chains(windowed, sampling, gamma=2))
    assert max_error(got, exact_joint(target.model, PROMPT, N, sampling)) < 1e-10
    with pytest.raises(ValueError, match="window"):
        XVocabDrafter(draft, DRAFT_VIEW, TARGET_VIEW, "slem", window=0)
    cut = TokenizerView("bytes", (b"\xc3", b"\xa9", b"a"), frozenset(), lambda s: [2] * len(s))
    byte_level = XVocabDrafter(draft, DRAFT_VIEW, cut, "slem", window=2)
    byte_level.start([0, 1, 2], spec)  # "é" split over two tokens; the window starts inside it
    assert byte_level.draft_context([0, 1, 2]) == bpe("a", D_VOCAB, D_MERGES)
