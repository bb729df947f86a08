"""Drafting across vocabularies: a draft model whose tokenizer differs from the target's.

Two algorithms of Timor et al., *Accelerating LLM Inference with Lossless Speculative Decoding
Algorithms for Heterogeneous Vocabularies*, ICML 2025 (arXiv 2502.05202), both exact at every
temperature, each for a stated reason:

* **TLI** (token-level intersection, the paper's Algorithm 4): the draft's logits are restricted to
  the tokens both vocabularies hold (the same bytes) and moved to the target's ids; the draft
  distribution q ``[V_target]`` is the standardized restricted logits (so q is renormalised on the
  shared tokens), and the drafts are drawn from exactly that q. Exact because a token-level
  verifier needs nothing but the q the drafts were drawn from (Leviathan et al. 2023, Thm. 1; the
  multi-draft verifiers likewise for their draft law): q may be any distribution that is a function
  of the committed context and the drafted prefix, zero outside the shared tokens included. So the
  ordinary verifiers apply unchanged: ``speculative``/``block`` for chains, ``kseq``/``rrs``/``ot``
  and the other i.i.d. verifiers for n i.i.d. drafts (and the WOR/greedy/SpecHub verifiers for
  those laws). The map between ids need not even be right: a wrong string match costs acceptance,
  never exactness. Condition: q puts mass on the shared tokens (a draft with no shared token is
  refused at construction).
* **SLEM** (string-level exact match, the paper's Algorithm 2): the draft generates text in its own
  tokens (sampled at the run's temperature), the text is re-encoded by the target's tokenizer after
  the committed context (:meth:`XVocabDrafter.slem_chain`), and the resulting target tokens are
  verified as a point-mass draft (q = δ: the target draws y ~ p and the draft is accepted iff
  y equals it). Exact for ANY proposal independent of the verification draws, whatever the boundary
  rule: P(emit y) = p(y) for every fixed draft, hence for every mixture of drafts. The boundary rule
  only decides how many drafted tokens the target accepts.

The draft's own context is the target's committed text re-encoded by the draft's tokenizer (a
function of the committed tokens, so it cannot bias the output either); the draft's KV cache keeps
the longest common prefix between calls (:meth:`specot.models.CausalLM.logits_after`). The draft
model may run in torch or on another backend (llama.cpp for a GGUF file: :mod:`specot.plan.kinds.xvocab`).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import Tensor

from .._validation import trusted_inputs
from ..geometry import token_tree
from ..sampling import SamplingConfig, standardize
from .base import DraftOutcome, DraftSchedule, DraftTree, Drafter
from .model import Chain, draft_chain, draft_tree_from_model
from .pricing import PricedChains
from .tree import DraftShape, TreeSpec

__all__ = ["TokenizerView", "VocabMap", "hf_tokenizer_view", "intersect_vocabularies", "XVocabDrafter",
           "XVOCAB_MODES"]

#: The algorithms: token-level intersection and string-level exact match.
XVOCAB_MODES = ("tli", "slem")

#: Texts every tokenizer view must reproduce byte for byte from its token pieces.
_PROBES = ("Hello world, the café costs 12.50 €!\n  def f(x):\treturn x**2  # ok", "日本語のテキスト")


@dataclass(frozen=True)
class TokenizerView:
    """What cross-vocabulary drafting reads of a tokenizer.

    Attributes:
        name: a label for messages.
        pieces: the bytes each token id stands for (``len(pieces)`` = the ids the model scores);
            special tokens hold their literal text.
        special: ids of special tokens (BOS, EOS, chat markers): never shared, never drafted.
        encode: text → token ids, without special tokens added.
        prefix: the ids the tokenizer puts before a text (its BOS), given to the model first.
    """

    name: str
    pieces: tuple[bytes, ...]
    special: frozenset[int]
    encode: Callable[[str], list[int]] = field(compare=False, repr=False)
    prefix: tuple[int, ...] = ()

    def text_bytes(self, ids: Sequence[int]) -> bytes:
        """The bytes of ``ids`` (concatenated pieces)."""
        return b"".join(self.pieces[int(i)] for i in ids)


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet (transformers' ``bytes_to_unicode``), inverted: printable stand-in
    character → byte."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {c: b for b, c in bytes_to_unicode().items()}


def _piece_bytes(tok: str, byte_level: bool, table: dict[str, int]) -> bytes:
    if byte_level:
        if all(ch in table for ch in tok):
            return bytes(table[ch] for ch in tok)
        return tok.encode("utf-8")
    if len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">"):  # SentencePiece byte fallback
        try:
            return bytes([int(tok[3:5], 16)])
        except ValueError:
            pass
    return tok.replace("\u2581", " ").encode("utf-8")


def hf_tokenizer_view(tokenizer: Any, vocab_size: int | None = None, name: str = "") -> TokenizerView:
    """A :class:`TokenizerView` of a Hugging Face tokenizer: byte-level BPE (GPT-2 style, ``Ġ`` for
    a space) or SentencePiece style (``▁`` for a space, ``<0xNN>`` byte tokens).

    Args:
        tokenizer: a ``PreTrainedTokenizerBase``.
        vocab_size: the ids the model scores (default ``len(tokenizer)``); ids past the tokenizer's
            get an empty piece and count as special.
        name: a label.

    Raises:
        ValueError: the pieces do not reproduce the probe texts byte for byte (a tokenizer whose
            token strings this reader does not understand: refused rather than mismatched).
    """
    size = int(vocab_size or len(tokenizer))
    known = min(size, len(tokenizer))
    toks = [t or "" for t in tokenizer.convert_ids_to_tokens(list(range(known)))]
    special = set(int(i) for i in getattr(tokenizer, "all_special_ids", []) if int(i) < size)
    for i, tok in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if getattr(tok, "special", False) and int(i) < size:
            special.add(int(i))
    special.update(range(known, size))

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    with_specials = list(tokenizer("a")["input_ids"])
    plain = encode("a")
    cut = len(with_specials) - len(plain)
    prefix = tuple(with_specials[:cut]) if cut > 0 and with_specials[cut:] == plain else ()
    label = name or type(tokenizer).__name__
    encoded = [(probe, encode(probe)) for probe in _PROBES]
    table = _byte_decoder()
    got = b""
    for byte_level in (True, False):  # the reading under which the pieces spell the probe texts
        pieces = [_piece_bytes(t, byte_level, table) for t in toks] + [b""] * (size - known)
        view = TokenizerView(label, tuple(pieces), frozenset(special), encode, prefix)
        bad = [(p, got) for p, ids in encoded if (got := view.text_bytes(ids)) != p.encode("utf-8")]
        if not bad:
            return view
    probe, got = bad[0]
    raise ValueError(f"cannot read the token strings of tokenizer {label!r}: its pieces give {got[:40]!r} for "
                     f"{probe[:40]!r}; cross-vocabulary drafting needs byte-level BPE or SentencePiece tokens")


@dataclass(frozen=True)
class VocabMap:
    """The shared tokens of a draft and a target vocabulary (same bytes, neither special).

    Attributes:
        draft_ids: ``[S]`` the draft id of each shared token (the lowest draft id with those bytes).
        target_ids: ``[S]`` its target id (the lowest target id with those bytes).
        to_draft: ``[V_target]`` target id → draft id of a shared token, ``-1`` elsewhere.
        target_vocab: V_target.
        draft_vocab: V_draft.
    """

    draft_ids: Tensor
    target_ids: Tensor
    to_draft: Tensor
    target_vocab: int
    draft_vocab: int

    @property
    def shared(self) -> int:
        """Number of shared tokens S."""
        return int(self.draft_ids.numel())

    def target_logits(self, draft_logits: Tensor) -> Tensor:
        """Draft logits ``[B, V_draft]`` → ``[B, V_target]``: each shared token's draft logit at its
        target id, −inf elsewhere (TLI's restriction; standardize renormalises on the shared set)."""
        out = torch.full((*draft_logits.shape[:-1], self.target_vocab), float("-inf"), dtype=draft_logits.dtype,
                         device=draft_logits.device)
        out[..., self.target_ids.to(out.device)] = draft_logits[..., self.draft_ids.to(out.device)]
        return out


def intersect_vocabularies(draft: TokenizerView, target: TokenizerView) -> VocabMap:
    """TLI's vocabulary intersection by token bytes (Timor et al. 2025, §3.3).

    Raises:
        ValueError: the vocabularies share no token.
    """
    first_target: dict[bytes, int] = {}
    for i, b in enumerate(target.pieces):
        if b and i not in target.special:
            first_target.setdefault(b, i)
    d_ids, t_ids, taken = [], [], set()
    for i, b in enumerate(draft.pieces):
        t = first_target.get(b) if b and i not in draft.special else None
        if t is not None and t not in taken:
            taken.add(t)
            d_ids.append(i)
            t_ids.append(t)
    if not d_ids:
        raise ValueError(f"tokenizers {draft.name!r} and {target.name!r} share no token: token-level intersection "
                         "cannot draft (use the string-level mode 'slem')")
    to_draft = torch.full((len(target.pieces),), -1, dtype=torch.int64)
    to_draft[torch.tensor(t_ids)] = torch.tensor(d_ids)
    return VocabMap(torch.tensor(d_ids), torch.tensor(t_ids), to_draft, len(target.pieces), len(draft.pieces))


class _TargetVocabDraft:
    """A draft model seen in the target's vocabulary: fed draft ids for its context and target ids
    (shared tokens) for its drafts; returns TLI's restricted logits ``[T, V_target]``. Quacks like
    the :class:`~specot.models.CausalLM` methods that :mod:`specot.drafting.model` drafts with.

    A draft model without ``forward_tree`` but with ``tree_logits(context, tree)`` (a backend's
    target model, e.g. llama.cpp's, which scores a whole token tree in one batch) drafts
    trees too: each depth's :meth:`forward_tree` scores the tree drafted so far in one such call
    and returns the rows of the new nodes (the rows are that model's logits for the same prefixes,
    so the q handed over is the q the drafts are drawn from)."""

    def __init__(self, model: Any, vmap: VocabMap) -> None:
        self.model, self.vmap = model, vmap
        self._emulate = not hasattr(model, "forward_tree") and hasattr(model, "tree_logits")
        self._context: list[int] = []  # draft ids of the last logits_after (the tree's root context)
        self._nodes: list[int] = []  # the tree drafted so far: draft ids and parents (0: the root; node j: j)
        self._parents: list[int] = []

    @property
    def cached_ids(self) -> list[int]:
        return self.model.cached_ids + (self._nodes if self._emulate else [])

    def _ids(self, tokens: Sequence[int] | Tensor) -> Tensor:
        t = torch.as_tensor(tokens, dtype=torch.int64).reshape(-1)
        return self.vmap.to_draft.to(t.device)[t]

    def logits_after(self, draft_context: Sequence[int]) -> Tensor:
        self._context, self._nodes, self._parents = list(draft_context), [], []
        return self.vmap.target_logits(self.model.logits_after(draft_context))

    def forward(self, tokens: Sequence[int] | Tensor) -> Tensor:
        return self.vmap.target_logits(self.model.forward(self._ids(tokens).to(self.model.device)))

    def forward_tree(self, tokens: Sequence[int], parents: Sequence[int]) -> Tensor:
        """Logits ``[F, V_target]`` of ``tokens`` (target ids) whose parents sit at draft-cache
        indices ``parents`` (the root: the last context token)."""
        ids = self._ids(tokens).tolist()
        if not self._emulate:
            return self.vmap.target_logits(self.model.forward_tree(ids, parents))
        base = len(self._context)
        for tok, pos in zip(ids, parents):
            if not base - 1 <= int(pos) < base + len(self._nodes):
                raise ValueError(f"draft tree parent at cache index {pos} is neither the root ({base - 1}) nor a "
                                 f"node drafted before ({base}..{base + len(self._nodes) - 1})")
            self._parents.append(int(pos) - base + 1 if int(pos) >= base else 0)
            self._nodes.append(int(tok))
        tree = token_tree([self._context[-1]] + self._nodes, [-1] + self._parents)
        rows = self.model.tree_logits(self._context, tree)  # [1 + N, V_draft]
        return self.vmap.target_logits(rows[len(rows) - len(ids):])


def _utf8_prefix(data: bytes) -> str:
    """The longest valid UTF-8 text at the start of ``data`` (an incomplete last character dropped;
    the text stops before the first invalid sequence). One C-speed decode: the error names where
    the first invalid or incomplete sequence starts."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return data[:exc.start].decode("utf-8")


class XVocabDrafter(Drafter):
    """A draft model with its own tokenizer, drafting for any target (module docstring).

    Args:
        model: the draft model: a :class:`~specot.models.CausalLM` or a backend's target model
            (llama.cpp's) with ``logits_after``, ``forward``, ``cached_ids``, ``reset`` and, for
            TLI trees, ``forward_tree`` or ``tree_logits``.
        draft_view: its :class:`TokenizerView` (``len(pieces)`` = its logits' width).
        target_view: the target's.
        mode: ``"tli"`` (chains and trees of any draft law, q ``[M, V_target]``) or ``"slem"``
            (deterministic chains, verified as one-hot q).
        lookbehind: SLEM: committed target tokens re-encoded with the drafted text (the boundary).
        drop_last: SLEM: drafted target tokens dropped at the end of the re-encoded text (the last
            one may merge differently once the text goes on).
        pricing: prices its chains (:class:`~specot.drafting.pricing.PricedChains`; TLI chains node
            by node in target tokens, SLEM chains in draft tokens, learning from the drafted text's
            accepted bytes), or ``None``: chains of γ (SLEM: γ + ``drop_last`` draft tokens).
        window: the draft model reads only the prompt's last ``window`` target tokens (then all
            it generates), or ``None``: the whole prompt. Its pass over a long prompt is then
            short (a 135M draft read a 300-token prompt in ~0.5 s on a 2-vCPU CPU, ~10 % of a
            48-token answer from a 1.5B target), at the cost of what it forgets.

    Raises:
        ValueError: unknown mode, negative ``lookbehind``/``drop_last``, ``window`` below 1, or
            (TLI) no shared token.
    """

    def __init__(self, model: Any, draft_view: TokenizerView, target_view: TokenizerView, mode: str = "tli",
                 lookbehind: int = 4, drop_last: int = 1, pricing: PricedChains | None = None,
                 window: int | None = None) -> None:
        super().__init__()
        if mode not in XVOCAB_MODES:
            raise ValueError(f"cross-vocabulary mode must be one of {XVOCAB_MODES}, got {mode!r}")
        if lookbehind < 0 or drop_last < 0:
            raise ValueError(f"lookbehind and drop_last must be >= 0, got {lookbehind}, {drop_last}")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be a number of tokens >= 1 or None, got {window!r}")
        self.window = window
        self._from = 0  # the first committed target position the draft reads (the window's start)
        self.model, self.draft_view, self.target_view, self.mode = model, draft_view, target_view, mode
        self.lookbehind, self.drop_last = lookbehind, drop_last
        self.vmap = intersect_vocabularies(draft_view, target_view) if mode == "tli" else None
        # TLI chains draw from the shared tokens in target-id order: the inverse CDF (and the argmax's
        # first maximum) of the target-wide q row, without building that row
        order = torch.argsort(self.vmap.target_ids) if self.vmap is not None else None
        self._shared = (self.vmap.draft_ids[order], self.vmap.target_ids[order]) if self.vmap is not None else None
        self.name = f"xvocab-{mode}:{getattr(model, 'name', 'draft')}"
        self.pricing = pricing
        self._last_tree: DraftTree | None = None
        self._slem_spans: list[tuple[int, int]] = []  # SLEM: byte span of each draft token of the last chain
        self.last_draft_ids: list[int] = []  # SLEM: the draft tokens behind the last proposal

    @property
    def vocab_size(self) -> int:
        return len(self.target_view.pieces)

    @property
    def device(self) -> torch.device | None:
        return getattr(self.model, "device", None)

    def reset(self) -> None:
        self.model.reset()
        if self.pricing is not None:
            self.pricing.reset()

    def start(self, prompt_ids: Sequence[int], spec: DraftShape, schedule: DraftSchedule | None = None,
              stop_tokens: frozenset[int] = frozenset()) -> None:
        """:meth:`Drafter.start`; the draft's window starts ``window`` tokens before the prompt's end."""
        super().start(prompt_ids, spec, schedule, stop_tokens)
        self._from = 0 if self.window is None else max(0, len(prompt_ids) - self.window)

    def update(self, outcome: DraftOutcome) -> None:
        """:meth:`Drafter.update`; a priced chain's nodes teach the calibration whether they were
        accepted (SLEM: a draft token is accepted when its bytes lie within the accepted target
        tokens' bytes, verified when its first byte was reached)."""
        super().update(outcome)
        if self.pricing is None or outcome.tree is not self._last_tree or not self.pricing.last:
            return
        if self.mode == "tli":
            self.pricing.learn(outcome.accepted)
            return
        accepted = len(self.target_view.text_bytes(outcome.tree.path_tokens(outcome.path[-1]))) if outcome.path else 0
        drafted = len(self.target_view.text_bytes(outcome.tree.tokens[1:]))
        for conf, (lo, hi) in zip(self.pricing.last, self._slem_spans):
            if lo > accepted or lo >= drafted:
                break
            self.pricing.calibration.record(conf, hi <= accepted)
        self.pricing.last = []

    # ------------------------------------------------------------------ the two re-encodings
    def draft_context(self, context: Sequence[int]) -> list[int]:
        """The draft's ids for the committed target ids ``context``: the draft's prefix (its BOS),
        then the committed text (a target special token as its literal text) re-encoded by the
        draft's tokenizer — from the window's start (:attr:`window`; a character cut there dropped).
        A function of ``context`` and the prompt's length alone, so it cannot bias the output."""
        data = self.target_view.text_bytes(context[self._from:] if self._from else context)
        if self._from:
            data = data.lstrip(bytes(range(0x80, 0xC0)))  # a character begun before the window
        text = _utf8_prefix(data)
        ids = list(self.draft_view.prefix) + self.draft_view.encode(text)
        return ids if ids else [min(self.draft_view.special, default=0)]

    def slem_chain(self, context: Sequence[int], draft_ids: Sequence[int]) -> list[int]:
        """SLEM's boundary rule: target tokens for the text of ``draft_ids`` after ``context``.

        The drafted text stops before the first special draft token and an incomplete last UTF-8
        character. The last ``lookbehind`` committed tokens (shortened until their bytes are whole
        UTF-8) are re-encoded together with the drafted text; when that re-encoding starts with
        those very tokens, what follows them is the draft (the target's own tokenization across the
        boundary), otherwise the drafted text is encoded on its own. The last ``drop_last`` tokens
        are dropped (a longer text could merge them differently). Any rule is exact (module
        docstring); this one keeps the text of ``context + chain`` a prefix of the committed text
        plus the drafted text.
        """
        new = bytearray()
        for i in draft_ids:
            if int(i) in self.draft_view.special:
                break
            new += self.draft_view.pieces[int(i)]
        text = _utf8_prefix(bytes(new))
        if not text:
            return []
        chain = None
        for k in range(min(self.lookbehind, len(context)), 0, -1):
            tail = [int(t) for t in context[len(context) - k:]]
            if any(t in self.target_view.special for t in tail):
                continue
            try:
                tail_text = self.target_view.text_bytes(tail).decode("utf-8")
            except UnicodeDecodeError:
                continue
            enc = self.target_view.encode(tail_text + text)
            if enc[:k] == tail:
                chain = enc[k:]
                break
        if chain is None:
            chain = self.target_view.encode(text)
        return chain[:max(0, len(chain) - self.drop_last)]

    # ------------------------------------------------------------------ drafting
    def tli_q(self, draft_context: Sequence[int], sampling: SamplingConfig) -> Tensor:
        """TLI's q ``[V_target]`` after ``draft_context`` (draft ids): the standardized restricted logits."""
        assert self.vmap is not None
        return standardize(self.vmap.target_logits(self.model.logits_after(draft_context)), sampling)[0]

    def propose(self, context: Sequence[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftTree:
        """A draft after the committed target ids ``context``: TLI chains/trees with q ``[M, V_target]``,
        or a SLEM chain (deterministic, q = None) of at most ``min(schedule γ, gamma)`` target tokens."""
        depth = self.depth_limit(gamma)
        t0 = time.perf_counter()
        root = int(context[-1])
        if depth <= 0:
            tree = DraftTree.root(root)
        elif self.mode == "tli":
            tree = self._propose_tli(context, depth, sampling, generator, gamma)
        else:
            tree = self._propose_slem(context, depth, sampling, generator)
        tree.tokens[0] = root
        self._last_tree = tree
        self.calls += tree.draft_calls
        self.draft_time_s += time.perf_counter() - t0
        return tree

    def _propose_tli(self, context: Sequence[int], depth: int, sampling: SamplingConfig,
                     generator: torch.Generator | None, gamma: int) -> DraftTree:
        assert self.vmap is not None
        spec = self.spec if self.spec is not None else TreeSpec.sequences(1, max(gamma, 1))
        dctx = self.draft_context(context)
        with trusted_inputs():
            if spec.is_chain():  # drawn from the shared tokens' logits: no [V_target] row per draft pass
                chain = self._chain(dctx, depth, sampling, generator, self.stop_tokens, shared=self._shared,
                                    width=self.vmap.target_vocab)
                tree = DraftTree.chain(int(context[-1]), chain.tokens, chain.q)  # q: [γ, V_target] or none (T = 0)
                tree.draft_calls, tree.q_standardized = chain.passes, True
                return tree
            lm = _TargetVocabDraft(self.model, self.vmap)
            tree, _ = draft_tree_from_model(lm, dctx, spec, min(depth, spec.depth), sampling,  # type: ignore[arg-type]
                                            generator, self.stop_tokens)
        return tree

    def _propose_slem(self, context: Sequence[int], depth: int, sampling: SamplingConfig,
                      generator: torch.Generator | None) -> DraftTree:
        dctx = self.draft_context(context)
        with trusted_inputs():
            drafted = self._chain(dctx, depth, sampling, generator, self.draft_view.special, keep_q=False,
                                  tail=self.drop_last)
        ids = drafted.tokens
        self.last_draft_ids = ids
        ends = list(itertools.accumulate(len(self.draft_view.pieces[t]) for t in ids))
        self._slem_spans = list(zip([0] + ends[:-1], ends))
        chain = [t for t in self.slem_chain(context, ids)][:depth]
        cut = next((j + 1 for j, t in enumerate(chain) if t in self.stop_tokens), len(chain))
        tree = DraftTree.chain(int(context[-1]), chain[:cut])
        tree.draft_calls = drafted.passes
        return tree

    def _chain(self, dctx: list[int], depth: int, sampling: SamplingConfig, generator: torch.Generator | None,
               stop_tokens: frozenset[int], **kw: Any) -> Chain:
        """A chain of the draft model after its context ``dctx`` (:func:`specot.drafting.model.draft_chain`),
        priced by :attr:`pricing`; its confidences noted for :meth:`update`."""
        pricer = self.pricing.pricer if self.pricing is not None else None
        chain = draft_chain(lambda: self.model.logits_after(dctx), lambda tok: self.model.forward([int(tok)]), depth,
                            sampling, generator, stop_tokens=stop_tokens, pricer=pricer, **kw)
        if self.pricing is not None:
            self.pricing.note(chain.confidences)
        return chain
