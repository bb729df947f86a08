"""The decoding plan: what to draft, the draft-tree shape, the verifier, the cache and the backend —
decided once, before any model is loaded, and passed around instead of strings.

:func:`make_plan` takes the options of :func:`specot.generate` / ``specot generate`` (or
``draft="auto"``) and returns a frozen :class:`DecodingPlan`, refusing, in one line each,
everything that would fail later or run silently lossy or absurdly slow: an unknown draft name, an
option the draft does not take, a tree the draft cannot draft, a verifier that is not exact for the
tree's draft law (Hu et al. 2025; SpecTr Theorem 2), a lossy verifier without explicit parameters,
a tree too large to pay for itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from .._validation import check_count, check_device
from ..drafting.tree import DraftShape, TreeBudget, TreeSpec, default_law_for, parse_tree_spec
from ..engine.types import GenerationConfig
from ..laws import DraftLaw
from ..models.device import resolve_dtype
from ..sampling import SamplingConfig
from .auto import auto_choice
from ..models.protocol import TargetModel
from .backends import capabilities_for, check_target_source, choose_backend, peek_vocab_and_context
from .draft import DraftSpec, draft_kinds, parse_draft
from .verify import VerifierSpec, build_verifier, check_otm_size

__all__ = ["DecodingPlan", "make_plan", "resolve_tree_spec", "MAX_TREE_NODES", "DEFAULT_GAMMA"]

#: γ when the caller names none: the engine's default.
DEFAULT_GAMMA = GenerationConfig.gamma
#: The most draft tokens one iteration may score. A target pass over more tokens than this costs
#: more than its accepted tokens can save on any backend specot runs on (a 7-token pass already
#: costs 1.04–1.25 one-token passes on a CPU, and acceptance falls geometrically with depth), while
#: its verification and cache surgery grow with the tree: 1,000 drafts per node ran at 0.1 token/s.
MAX_TREE_NODES = 256
#: The caches a plan may ask for: ``auto`` (static KV caches replayed as CUDA graphs on CUDA where the
#: architecture supports them, else dynamic), ``dynamic``, ``cuda_graphs`` (off CUDA: the same padded
#: passes, eagerly — slower, a test path; the CLI refuses it there).
CACHES = ("auto", "dynamic", "cuda_graphs")


@dataclass(frozen=True)
class DecodingPlan:
    """How to decode: made by :func:`make_plan` before any model is loaded.

    Attributes:
        draft: the draft (:class:`~specot.plan.DraftSpec`), or ``None`` for autoregressive decoding.
        tree: the draft-tree shape of every iteration: a fixed construction
            (:class:`~specot.drafting.TreeSpec`), the budget of a drafter that builds its own
            trees (:class:`~specot.drafting.TreeBudget`: children per node and depth; suffix
            decoding), or ``None`` for one draft chain of γ tokens (Leviathan et al. 2023, Algorithm 1).
        verifier: the verifier, checked exact for the tree's draft law at every node.
        gamma: draft length γ of a chain (a tree's is its depth).
        gamma_schedule: ``"constant"`` or ``"heuristic"`` (the drafter owns it).
        cache: ``"auto"``, ``"dynamic"`` or ``"cuda_graphs"`` (:data:`CACHES`).
        backend: the target backend (``"transformers"``, or one from ``specot.backends``).
        dtype: the dtype asked for (``"auto"``: bf16 where matmuls are native bf16, else float32).
        device: the device asked for.
        reason: why ``auto`` chose this plan where a measurement decided (a draft model's verdict on
            this machine, :mod:`specot.plan.draft_verdict`), with its numbers; else empty.
    """

    draft: DraftSpec | None
    tree: DraftShape | None
    verifier: VerifierSpec
    gamma: int = DEFAULT_GAMMA
    gamma_schedule: str = "constant"
    cache: str = "auto"
    backend: str = "transformers"
    dtype: str | torch.dtype = "auto"
    device: str = "cpu"
    reason: str = ""

    @property
    def shape(self) -> DraftShape:
        """The draft-tree shape handed to the drafter: :attr:`tree`, or a chain of γ."""
        return self.tree if self.tree is not None else TreeSpec.sequences(1, self.gamma)

    @property
    def cuda_graphs(self) -> bool | None:
        """``cache`` as :func:`specot.generate`'s ``cuda_graphs`` (``None``: on CUDA by default)."""
        return None if self.cache == "auto" else self.cache == "cuda_graphs"

    @property
    def min_confidence(self) -> float | None:
        """τ of the draft's EAGLE confidence gate (its own, or its draft model's), or ``None``."""
        if self.draft is None:
            return None
        return dict(self.draft.inner.options if self.draft.inner else self.draft.options).get("min_confidence")

    def describe(self) -> str:
        """One line: the draft and its shape, e.g. ``"suffix+eagle, tree greedy 3×6, min_confidence 0.1"``
        (a fixed tree: law, most drafts n per node, depth) or ``"suffix, budget 4 children × depth 4"``
        (a drafter's own trees within a :class:`~specot.drafting.TreeBudget`), then ``auto``'s
        :attr:`reason` where a measurement decided."""
        why = f" (auto: {self.reason})" if self.reason else ""
        if self.draft is None:
            return "none (autoregressive)" + why
        shape = "chain" if self.tree is None else self.tree.label()
        gate = self.min_confidence
        return f"{self.draft.name}, {shape}" + (f", min_confidence {gate:g}" if gate is not None else "") + why

    def check_vocab(self, vocab: int | None, sampling: SamplingConfig) -> None:
        """The plan's check that needs the target's vocabulary size V: the ``otm`` verifier's exact
        LP only for a draft support it can build (:func:`~specot.plan.verify.check_otm_size`).
        :func:`make_plan` makes it where V is known before the load (the model's files); the caller
        makes it again with the loaded target's V (``None``: unknown, nothing refused).

        Raises:
            ValueError: ``otm`` over a draft support above :data:`specot.verifiers.otm.MAX_OTM_SETS`.
        """
        check_otm_size(self.verifier.build(), vocab, sampling)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data (results and reports record it)."""
        return {"draft": None if self.draft is None else self.draft.name, "describe": self.describe(),
                "tree": None if self.tree is None else _tree_dict(self.tree),
                "verifier": self.verifier.name, "verifier_params": dict(self.verifier.params), "gamma": self.gamma,
                "gamma_schedule": self.gamma_schedule, "cache": self.cache, "backend": self.backend,
                "reason": self.reason}


def _tree_dict(tree: DraftShape) -> dict[str, Any]:
    if isinstance(tree, TreeBudget):
        return {"law": tree.law.value, "budget": {"children": tree.children, "depth": tree.depth},
                "name": tree.label()}
    return {"law": tree.law.value, "paths": len(tree.paths), "name": tree.name}


def resolve_tree_spec(tree: str | TreeSpec | None, *, n: int | None = None, gamma: int | None,
                      verifier: Any, tree_law: str | None = None) -> TreeSpec:
    """The fixed :class:`TreeSpec` of the tree options (``specot generate --drafts n --gamma γ --tree ...``).

    ``tree`` is a :class:`TreeSpec` or a CLI form (:func:`specot.drafting.parse_tree_spec`);
    ``None`` means n draft sequences of draft length γ = ``gamma`` branching at the root
    (:meth:`TreeSpec.sequences`). Where the form does not name the law (``None``,
    ``topology:FILE`` without one, ``eagle``), it is ``tree_law`` or else the verifier's own
    (:func:`specot.drafting.default_law_for`; IID where ``verifier`` is ``None``). Forms without
    expansion factors take γ = ``gamma``
    (default 4); forms with factors take γ from them (a ``gamma`` that differs is refused).

    Raises:
        ValueError: as :func:`specot.drafting.parse_tree_spec`.
    """
    if isinstance(tree, TreeSpec):
        return tree
    kind = (tree or "").partition(":")[0].strip().lower()
    names_law = kind not in ("", "topology", "eagle")
    law = tree_law if (tree_law or names_law) else (default_law_for(verifier).value if verifier is not None else None)
    has_factors = ":" in (tree or "") and kind != "topology"
    if gamma is None and not has_factors:
        gamma = DEFAULT_GAMMA
    return parse_tree_spec(tree, n=n, gamma=gamma, law=law)


def _shape(draft: DraftSpec, ver: VerifierSpec | None, *, gamma: int | None, n: int | None, tree: Any,
           tree_law: str | None) -> tuple[DraftShape | None, VerifierSpec]:
    """The draft tree (``None``: a chain) and the verifier for ``draft`` under the tree options,
    as the draft's kind declares its trees (:class:`~specot.plan.TreeSupport`): a
    :class:`TreeBudget` of ``n`` children × depth γ for a drafter that builds its own trees,
    else a fixed :class:`TreeSpec` of ``n`` drafts at the root. ``ver`` ``None`` (none named): the shape's
    own (:attr:`TreeSpec.default_verifier`)."""
    trees = draft.trees
    built = build_verifier(ver.name, dict(ver.params)) if ver is not None else None
    if trees.own_shape:  # the drafter builds its own trees (suffix decoding): children and depth only
        spec: DraftShape = _own_budget(draft, n=n, gamma=gamma, tree=tree)
    elif isinstance(tree, TreeBudget):
        raise ValueError(f"the {draft.name} draft draws fixed tree shapes; give tree= a construction (e.g. 'greedy' "
                         f"with n=...), not a {tree.label()}")
    elif n is not None or tree is not None:
        if trees.laws is not None and not trees.laws:
            raise ValueError(f"multi-draft tree decoding (n / tree) needs a draft MODEL (a directory, 'distilled', "
                             f"'eagle' or a CausalLM), not the {draft.name} drafter")
        if trees.laws is not None:  # e.g. suffix+MODEL: GREEDY-law trees only
            names = "/".join(sorted(law.value for law in trees.laws))
            asked = str(tree.law.value if isinstance(tree, TreeSpec) else tree or names).partition(":")[0].lower()
            if asked not in {law.value for law in trees.laws}:
                raise ValueError(f"a {draft.name} draft drafts {names.upper()}-law trees; use tree={names!r} or "
                                 f"n=..., not {tree!r}")
            tree, n, tree_law = tree or names, n or trees.default_children, names
        spec = resolve_tree_spec(tree, n=n, gamma=gamma, verifier=built, tree_law=tree_law)
    else:
        if built is None:
            return None, VerifierSpec(TreeSpec.sequences(1, gamma or DEFAULT_GAMMA).default_verifier)
        built.check_construction(DraftLaw.IID, 1)
        return None, ver
    if ver is None:
        ver = VerifierSpec(spec.default_verifier)
    if ver.name == "otm" and "law" not in dict(ver.params):
        ver = VerifierSpec("otm", tuple(sorted({**dict(ver.params), "law": spec.law}.items())))
    spec.check_verifier(ver.build())
    return spec, ver


def _own_budget(draft: DraftSpec, *, n: int | None, gamma: int | None, tree: Any) -> TreeBudget:
    """The :class:`TreeBudget` of a drafter that builds its own trees: ``tree`` when it is one
    (``n`` / ``gamma`` must agree with it), else ``n`` (default: the kind's) children × γ."""
    trees = draft.trees
    law = next(iter(trees.laws or {DraftLaw.GREEDY}))
    if isinstance(tree, TreeBudget):
        if (n is not None and n != tree.children) or (gamma is not None and gamma != tree.depth) \
                or tree.law != law:
            raise ValueError(f"tree={tree!r} contradicts n={n} / gamma={gamma} or the {draft.name} "
                             f"drafter's {law.value.upper()} law")
        return tree
    if tree is not None:
        raise ValueError(f"the {draft.name} drafter builds its own draft trees; use n (children per node) "
                         "and gamma (depth), or a TreeBudget, not tree=")
    return TreeBudget(n or trees.default_children, DEFAULT_GAMMA if gamma is None else gamma, law)


def tree_room(tree: DraftShape) -> int:
    """Draft tokens a plan reserves for one tree: a :class:`TreeSpec`'s slots; a
    :class:`TreeBudget`'s children × depth (the slots of ``TreeSpec.sequences(children, depth)``;
    the drafter's own node cap bounds its trees, e.g. ``SuffixDrafter(max_nodes=)``)."""
    return tree.children * tree.depth if isinstance(tree, TreeBudget) else tree.num_slots


def _check_size(tree: DraftShape | None, gamma: int, schedule: str) -> None:
    nodes = tree_room(tree) if tree is not None else gamma * (2 if schedule == "heuristic" else 1)
    if nodes > MAX_TREE_NODES:
        what = (f"a draft tree of {nodes} nodes ({tree.label()}, up to {tree.max_drafts_per_node()} drafts per node)"
                if tree is not None else f"a draft chain of up to {nodes} tokens (gamma {gamma})")
        raise ValueError(f"{what} is above the limit of {MAX_TREE_NODES} draft tokens per target pass: a pass over "
                         "that many costs more than it can save; lower --drafts / --gamma")


def _check_loaded_target(target: Any, dtype: str | torch.dtype, device: str) -> None:
    """A loaded target runs as loaded: a dtype or device asked for that differs is refused, not ignored."""
    if not isinstance(target, TargetModel):
        return
    if not (isinstance(dtype, str) and dtype == "auto") and resolve_dtype(dtype, device) != target.dtype:
        have = str(target.dtype).removeprefix("torch.")
        raise ValueError(f"the target is loaded in {have} but dtype {dtype!r} was asked for; load it in that dtype "
                         f"(specot.load_target(..., dtype={str(dtype).removeprefix('torch.')!r})) or leave dtype 'auto'")
    if torch.device(device).type != target.device.type and str(device) != "cpu":
        raise ValueError(f"the target is loaded on {target.device} but device {device!r} was asked for; load it "
                         f"there (specot.load_target(..., device={device!r})) or leave device 'cpu'")


def _option_defaults() -> dict[str, Any]:
    """``{option: default}`` of every registered drafter kind's options."""
    return {name: opt.default for kind in draft_kinds().values() for name, opt in kind.options.items()}


def make_plan(draft: Any = "auto", *, target: Any = None, backend: str = "auto", device: str = "cpu",
              dtype: str | torch.dtype = "auto", temperature: float = 1.0, gamma: int | None = None,
              gamma_schedule: str = "constant", n: int | None = None,
              tree: str | TreeSpec | TreeBudget | None = None,
              tree_law: str | None = None, verifier: str | None = None,
              verifier_params: Mapping[str, Any] | None = None, cache: str = "auto", top_k: int | None = None,
              **draft_options: Any) -> DecodingPlan:
    """The :class:`DecodingPlan` for the options of :func:`specot.generate`, checked before any
    model is loaded.

    Args:
        draft: ``"auto"`` (:mod:`specot.plan.auto`), ``"none"`` (autoregressive decoding), a draft
            name, a ready :class:`~specot.drafting.Drafter` or draft model, or a
            :class:`~specot.plan.DraftSpec` (:func:`specot.plan.parse_draft`).
        target: the target as given to :func:`specot.generate` (a name or a loaded target; ``auto``
            and the size checks read it).
        backend, device, dtype: where the target runs (:mod:`specot.plan.backends`): ``"auto"``
            (:func:`~specot.plan.backends.choose_backend`: a loaded target's own; for an automatic
            plan of the embedded target on a CPU the fastest installed backend; else transformers),
            ``"transformers"``, or an installed backend such as ``"llamacpp"``.
        temperature: the sampling temperature (``auto`` plans per temperature).
        gamma, gamma_schedule: draft length γ (default 4) and its schedule.
        n, tree, tree_law: the draft tree. ``n`` (``--drafts``), the number of drafts, is one number whose
            meaning is the drafter's: for a draft model (``model``, ``distilled``, ``eagle``'s
            fixed trees) n, the drafts at the root of ``tree``'s n-sequence construction
            (:func:`resolve_tree_spec`); for a drafter that builds its own trees (``suffix``) the
            ``children`` of its :class:`~specot.drafting.TreeBudget` (children per node × depth
            γ); for ``suffix+MODEL`` n of a GREEDY n-sequence tree, which the suffix drafter and
            EAGLE's dynamic trees read as children per node. ``tree``: a construction (a form or
            a :class:`TreeSpec`), or a :class:`TreeBudget` for a drafter that builds its own
            trees; unset: a chain, or the draft's own trees.
        verifier, verifier_params: the verifier; ``None`` (none named): the shape's own
            (:attr:`specot.drafting.TreeSpec.default_verifier`: ``speculative`` for a chain, the
            law's optimal verifier for a tree, :data:`specot.verifiers.LAW_VERIFIERS`).
        cache: ``"auto"``, ``"dynamic"`` or ``"cuda_graphs"``.
        top_k: the sampling's top-k, where set (bounds the draft support of the ``otm`` verifier).
        draft_options: the drafter options (``ngram_n``, ``ngram_corpus``, ``min_confidence``);
            ``None`` is unset.

    Raises:
        ValueError: any invalid option, in one line naming it and the fix.
        TypeError: an argument of the wrong type.
        FileNotFoundError: a draft or target path that does not exist.
    """
    if n is not None:
        check_count(n, "n", "--drafts")
    if gamma is not None:
        check_count(gamma, "gamma", "--gamma")
    if cache not in CACHES:
        raise ValueError(f"cache must be one of {', '.join(CACHES)}, got {cache!r}")
    resolve_dtype(dtype, device)
    check_device(device)
    if verifier is None and verifier_params:
        raise ValueError(f"verifier_params {dict(verifier_params)!r} need a verifier to apply to: name it "
                         "(verifier=..., CLI --verifier)")
    ver = VerifierSpec.of(verifier, verifier_params) if verifier is not None else None
    _check_loaded_target(target, dtype, device)
    is_auto = isinstance(draft, str) and draft == "auto"
    automatic = is_auto and n is None and tree is None and ver is None and cache == "auto"
    backend = choose_backend(backend, str(target) if isinstance(target, Path) else target, device=device,
                             dtype=dtype, automatic=automatic)
    check_target_source(target, backend)  # as the chosen backend loads it (llama.cpp: a .gguf file)
    reason = ""
    if is_auto:
        choice = auto_choice(target, device, backend=backend, dtype=dtype, temperature=temperature, n=n,
                             gamma=gamma, tree=tree, verifier=verifier, verifier_params=verifier_params)
        draft, n, gamma, reason = choice.draft, choice.children, choice.gamma, choice.reason
        chosen = choice.draft_options
        # the table's options hold unless the caller gave another value than the kind's default
        # (the front doors pass every option, defaults included: generate's ngram_corpus "pydoc")
        defaults = _option_defaults()
        draft_options = {**chosen, **{k: v for k, v in draft_options.items()
                                      if v is not None and not (k in chosen and v == defaults.get(k, object()))}}
    common = dict(verifier=ver, gamma=DEFAULT_GAMMA if gamma is None else gamma, gamma_schedule=gamma_schedule,
                  cache=cache, backend=backend, dtype=dtype, device=device, reason=reason)
    if draft is None or (isinstance(draft, str) and draft == "none"):
        chain = TreeSpec.sequences(1, common["gamma"]).default_verifier
        return DecodingPlan(None, None, **{**common, "verifier": ver or VerifierSpec(chain)})
    spec = parse_draft(draft, **draft_options)
    spec.check()
    if spec.needs_hidden_states:
        capabilities_for(target, backend).check_hidden_states(f"draft {spec.name!r}", backend)
    tree_spec, ver = _shape(spec, ver, gamma=gamma, n=n, tree=tree, tree_law=tree_law)
    _check_size(tree_spec, common["gamma"], gamma_schedule)
    plan = DecodingPlan(spec, tree_spec, **{**common, "verifier": ver})
    plan.check_vocab(peek_vocab_and_context(target)[0], SamplingConfig(temperature=temperature, top_k=top_k))
    return plan

