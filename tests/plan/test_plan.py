"""The decoding plan: every draft name parsed by its kind, every refusal made before a model loads,
the default verifier of each tree law, ``auto``'s rule, and the registry (a kind is one module)."""

from __future__ import annotations

import pytest
import torch

import specot.plan as P
from specot.drafting import EagleDrafter, HybridDrafter, ModelDrafter, NGramDrafter, SuffixDrafter, TreeBudget, TreeSpec
from specot.laws import DraftLaw
from specot.verifiers import LAW_VERIFIERS
from specot.plan.auto import AUTO_MIN_CONFIDENCE_GREEDY, auto_choice
from specot.plan.draft import _REGISTRY, DraftKind, DraftSpec, TreeSupport, register_kind

from model_helpers import tiny_lm


# --------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("name, kind, source, inner", [
    ("ngram", "ngram", None, None),
    ("suffix", "suffix", None, None),
    ("eagle", "eagle", None, None),
    ("eagle:/some/head", "eagle", "/some/head", None),
    ("distilled", "model", "distilled", None),
    ("./my-draft", "model", "./my-draft", None),
    ("org/draft-model", "model", "org/draft-model", None),
    ("suffix+eagle", "hybrid", None, "eagle"),
    ("suffix+eagle:/h", "hybrid", None, "eagle"),
    ("suffix+distilled", "hybrid", None, "model"),
])
def test_every_draft_name_is_parsed_by_its_kind(name, kind, source, inner):
    spec = P.parse_draft(name)
    assert (spec.kind, spec.source, spec.name) == (kind, source, name)
    assert (spec.inner.kind if spec.inner else None) == inner
    assert P.parse_draft(spec) is spec  # parsed once: a spec passes through


def test_options_are_filled_with_defaults_and_routed_to_their_kind():
    assert dict(P.parse_draft("ngram").options) == {"ngram_n": 3, "ngram_corpus": "pydoc"}
    assert dict(P.parse_draft("suffix", ngram_n=5).options)["ngram_n"] == 5
    hy = P.parse_draft("suffix+eagle", min_confidence=0.2, ngram_corpus="none")
    assert dict(hy.options)["ngram_corpus"] == "none" and dict(hy.inner.options)["min_confidence"] == 0.2
    # a value that changes nothing for a draft that does not take the option is accepted
    assert P.parse_draft("eagle", ngram_corpus="none", ngram_n=3).kind == "eagle"


@pytest.mark.parametrize("name, options, error, match", [
    ("ngram", {"min_confidence": 0.1}, ValueError, "has none"),
    ("eagle", {"ngram_n": 5}, ValueError, "--ngram-n"),
    ("distilled", {"ngram_corpus": "pydoc-but-other"}, ValueError, "ngram_corpus"),
    ("eagle", {"min_confidence": 1.5}, ValueError, r"min_confidence must be a number in \(0, 1\)"),
    ("eagle", {"min_confidence": True}, ValueError, "min_confidence"),
    ("ngram", {"ngram_n": 0}, ValueError, r"ngram_n \(--ngram-n\) must be an integer >= 1"),
    ("suffix", {"ngram_corpus": "/no/such/corpus.txt"}, FileNotFoundError, "does not exist"),
    ("suffix+ngram", {}, ValueError, "model-free"),
    ("suffix+suffix", {}, ValueError, "model-free"),
    ("suffix+", {}, ValueError, "name a draft MODEL"),
    ("suffix+auto", {}, ValueError, "name a draft MODEL"),
    ("ngram", {"no_such_option": 1}, TypeError, "unknown drafter option"),
])
def test_parse_refusals(name, options, error, match):
    with pytest.raises(error, match=match):
        P.parse_draft(name, **options)


def test_auto_and_wrong_types_are_refused_by_the_parser():
    with pytest.raises(ValueError, match="resolved by"):
        P.parse_draft("auto")
    with pytest.raises(TypeError, match="draft must be"):
        P.parse_draft(3.5)


@pytest.mark.parametrize("name, match", [
    ("/no/such/draft", "does not exist"),
    ("eagle:/no/such/head", "no config.json"),
    ("suffix+/no/such/draft", "does not exist"),
    ("suffix+eagle:/no/such/head", "no config.json"),
])
def test_each_kind_checks_its_files_before_loading(name, match):
    spec = P.parse_draft(name)
    with pytest.raises(FileNotFoundError, match=match):
        spec.check()


def test_a_kind_whose_check_is_skipped_would_let_a_missing_file_through(monkeypatch):
    """The refusal above comes from the kind's own check: with it skipped, nothing refuses."""
    spec = P.parse_draft("eagle:/no/such/head")
    monkeypatch.setattr(type(spec.kind_obj), "check", lambda self, s: None)
    spec.check()  # no error: so the test above fails if a kind's checks are skipped


def test_ready_objects_are_typed_by_their_kind():
    target, draft = tiny_lm(0), tiny_lm(1)
    assert P.parse_draft(NGramDrafter()).kind == "ngram"
    assert P.parse_draft(SuffixDrafter(vocab_size=16)).kind == "suffix"
    assert P.parse_draft(draft).kind == "model"
    assert P.parse_draft(ModelDrafter(draft)).kind == "model"
    eagle = EagleDrafter.random(target, seed=0)
    assert P.parse_draft(eagle).kind == "eagle"
    hy = P.parse_draft(HybridDrafter(SuffixDrafter(vocab_size=16), eagle))
    assert hy.kind == "hybrid" and hy.inner.kind == "eagle"

    class Mine(NGramDrafter.__mro__[1]):  # a Drafter of the caller's own
        def propose(self, context, gamma, sampling, generator=None):
            raise NotImplementedError

    assert P.parse_draft(Mine()).kind == "drafter"


# --------------------------------------------------------------------------- plans
def test_chains_trees_and_the_verifier_each_gets():
    assert P.make_plan("ngram", gamma=5).describe() == "ngram, chain"
    assert P.make_plan("ngram").gamma == 4 and P.make_plan("ngram").tree is None
    suffix = P.make_plan("suffix", gamma=3, n=2)
    assert suffix.tree == TreeBudget(children=2, gamma=3, law=DraftLaw.GREEDY)  # a budget, not a shape
    assert suffix.describe() == "suffix, budget 2 children × depth 3"
    assert suffix.verifier.name == "greedy"  # optimal for a deterministic tree
    for tree, law, verifier in (("wor", DraftLaw.WOR, "rrs_wor"), ("iid", DraftLaw.IID, "kseq"),
                                ("greedy", DraftLaw.GREEDY, "greedy"), ("spechub", DraftLaw.SPECHUB, "spechub")):
        plan = P.make_plan("distilled", n=2, tree=tree)
        assert (plan.tree.law, plan.verifier.name) == (law, verifier)
    assert P.make_plan("distilled", n=3, verifier="rrs").verifier.name == "rrs"  # iid from the verifier
    otm = P.make_plan("distilled", n=2, tree="wor", verifier="otm", top_k=4)
    assert dict(otm.verifier.params)["law"] == DraftLaw.WOR  # the exact LP for the tree's own law
    hy = P.make_plan("suffix+distilled", n=3, gamma=2)
    assert (hy.tree.law, hy.verifier.name, hy.describe()) == (DraftLaw.GREEDY, "greedy", "suffix+distilled, tree greedy 3×2")
    assert P.make_plan("suffix+distilled").tree is None  # chains without tree options
    assert P.make_plan("none").draft is None


#: Tree shapes of every kind: chains, K sequences, prefix trees, an uneven topology.
_SHAPES = [("seq", 1, 1), ("seq", 1, 3), ("seq", 2, 1), ("seq", 3, 2), ("prefix", (2, 1)), ("prefix", (2, 2, 1)),
           ("prefix", (1, 2)), ("topology", ((0,), (1,), (0, 0), (0, 1), (1, 0)))]


def _tree(shape: tuple, law: DraftLaw) -> TreeSpec:
    if shape[0] == "seq":
        return TreeSpec.sequences(shape[1], shape[2], law)
    if shape[0] == "prefix":
        return TreeSpec.prefix(shape[1], law)
    return TreeSpec.topology(shape[1], law)


#: Every kind of shape: fixed trees of every law, and budgets of drafters that build their own trees.
_ALL_SHAPES = [(shape, law) for shape in _SHAPES for law in DraftLaw] + [("budget", c) for c in (1, 2, 3)]


def _shape_of(shape: tuple, arg):
    if shape == "budget":
        return TreeBudget(arg, 2)
    return _tree(shape, arg)


@pytest.mark.parametrize("shape, arg", _ALL_SHAPES, ids=str)
def test_the_plan_the_engine_and_vllm_pick_one_default_verifier(monkeypatch, shape, arg):
    """The default verifier is a property of the shape (:attr:`TreeSpec.default_verifier`,
    :attr:`TreeBudget.default_verifier`): the plan, :func:`specot.engine.tree_generate` without a
    verifier and the vLLM integration's settings name the same one for every shape — speculative
    for a chain, the law's own for a tree, the law's own for every budget of a drafter's trees."""
    import specot.engine.generate as G
    from specot.engine import GenerationConfig, tree_generate
    from specot_vllm.config import CHAIN_SHAPE, TREE_SHAPE, SpecotVllmConfig, tree_config

    try:
        spec = _shape_of(shape, arg)
    except ValueError:  # e.g. more than 2 children per node under SpecHub's law
        pytest.skip(f"{shape} is not a {arg} tree")
    used = []
    monkeypatch.setattr(G, "decode", lambda *a, verifier, **k: used.append(verifier.name))
    drafter = SuffixDrafter(16) if isinstance(spec, TreeBudget) else tiny_lm(1)
    tree_generate(tiny_lm(0), drafter, [1, 2], spec, GenerationConfig(max_new_tokens=2))
    plan = P.make_plan("suffix" if isinstance(spec, TreeBudget) else "distilled", tree=spec)
    assert plan.verifier.name == used[0] == spec.default_verifier
    if isinstance(spec, TreeBudget):
        assert used[0] == LAW_VERIFIERS[spec.law]
    else:
        assert used[0] == ("speculative" if spec.max_drafts_per_node() == 1 else LAW_VERIFIERS[spec.law])
    # vLLM: chains and the tree proposer's budgets, unset verifier = the shape's
    assert SpecotVllmConfig().verifier == CHAIN_SHAPE.default_verifier == TreeSpec.sequences(1, 3).default_verifier
    assert SpecotVllmConfig(tree=True).verifier == tree_config(None).verifier == TREE_SHAPE.default_verifier
    assert TREE_SHAPE.default_verifier == TreeBudget(arg if shape == "budget" else 2, 2).default_verifier


def test_an_unnamed_verifier_is_none_and_speculative_is_a_name():
    """``verifier=None`` means none named; ``"speculative"`` names the single-draft verifier, which a
    tree of several drafts per node refuses (not silently replaced by the law's own)."""
    assert P.make_plan("distilled", n=3).verifier.name == "kseq"
    with pytest.raises(ValueError, match="cannot be verified by 'speculative'"):
        P.make_plan("distilled", n=3, verifier="speculative")
    assert P.make_plan("ngram").verifier.name == "speculative" and P.make_plan("none").verifier.name == "speculative"
    assert P.make_plan("auto", dtype="bfloat16", verifier="speculative").describe() == "suffix+eagle, chain"
    with pytest.raises(ValueError, match="need a verifier"):
        P.make_plan("ngram", verifier_params={"lenience": 0.5})


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(draft="ngram", n=2), ValueError, "needs a draft MODEL"),
    (dict(draft="suffix", tree="wor"), ValueError, "builds its own draft trees"),
    (dict(draft="suffix+distilled", tree="wor"), ValueError, "GREEDY-law trees"),
    (dict(draft="distilled", n=2, tree="wor", verifier="kseq"), ValueError, "cannot be verified by 'kseq'"),
    (dict(draft="distilled", n=2, verifier="speculative", verifier_params={"lenience": 1}), ValueError,
     "cannot be verified"),
    (dict(draft="ngram", verifier="lenient"), ValueError, "lossy"),
    (dict(draft="ngram", verifier="nope"), ValueError, "unknown verifier"),
    (dict(draft="ngram", verifier="speculative", verifier_params={"lenience": 0.5}), ValueError, "lossless one"),
    (dict(draft="distilled", n=1000), ValueError, "limit of 256 draft tokens"),
    (dict(draft="suffix", n=100, gamma=4), ValueError, "limit of 256"),
    (dict(draft="ngram", gamma=300), ValueError, "gamma 300"),
    (dict(draft="ngram", gamma=200, gamma_schedule="heuristic"), ValueError, "up to 400 tokens"),
    (dict(draft="ngram", n=0), ValueError, r"n \(--drafts\)"),
    (dict(draft="ngram", gamma=0), ValueError, r"gamma \(--gamma\)"),
    (dict(draft="ngram", cache="paged"), ValueError, "cache must be one of"),
    (dict(draft="ngram", backend="nope"), ValueError, "unknown backend 'nope'"),
    (dict(draft="ngram", dtype="float8"), ValueError, "unknown dtype"),
    (dict(draft="distilled", n=2, tree="wor", verifier="otm"), ValueError, "otm.*cannot run here"),
    (dict(draft="distilled", n=3, tree="prefix:2,2"), ValueError, "contradicts"),
])
def test_plan_refusals(kwargs, error, match):
    with pytest.raises(error, match=match):
        P.make_plan(**kwargs)


def test_a_loaded_target_runs_as_loaded():
    target = tiny_lm(0, dtype=torch.float32)
    assert P.make_plan("ngram", target=target, dtype="auto").draft.kind == "ngram"
    P.make_plan("ngram", target=target, dtype="float32")  # what it is: fine
    with pytest.raises(ValueError, match="loaded in float32 but dtype 'bfloat16'"):
        P.make_plan("ngram", target=target, dtype="bfloat16")


def test_the_plan_is_frozen_and_records_itself():
    plan = P.make_plan("suffix+distilled", n=2, gamma=3)
    with pytest.raises(AttributeError):
        plan.gamma = 5  # type: ignore[misc]
    d = plan.to_dict()
    assert d["draft"] == "suffix+distilled" and d["verifier"] == "greedy" and d["tree"]["law"] == "greedy"
    assert plan == P.make_plan("suffix+distilled", n=2, gamma=3)


# --------------------------------------------------------------------------- auto
def test_auto_on_the_embedded_target_on_a_cpu():
    t1 = P.make_plan("auto", dtype="bfloat16")
    assert t1.describe() == "suffix+eagle, tree greedy 2×3" and t1.verifier.name == "greedy"
    t0 = P.make_plan("auto", dtype="bfloat16", temperature=0)
    assert t0.describe() == f"suffix+eagle, tree greedy 3×6, min_confidence {AUTO_MIN_CONFIDENCE_GREEDY:g}"
    assert P.make_plan("auto", dtype="bfloat16", temperature=0, gamma=4).tree.depth == 4
    # the caller's verifier: chains; another tree law: the EAGLE head alone, which drafts any law
    assert P.make_plan("auto", dtype="bfloat16", verifier="block").describe() == "suffix+eagle, chain"
    assert P.make_plan("auto", dtype="bfloat16", n=2, tree="wor").draft.name == "eagle"
    assert P.make_plan("auto", dtype="bfloat16", n=2, tree="greedy").draft.name == "suffix+eagle"


def test_auto_elsewhere_is_ngram(tiny_model_dir):
    assert auto_choice(None, "cuda", dtype="bfloat16").draft == "ngram"
    assert auto_choice(str(tiny_model_dir)).draft == "ngram"
    assert auto_choice(tiny_lm(0)).draft == "ngram"
    assert P.make_plan("auto", target=str(tiny_model_dir)).describe() == "ngram, chain"


# --------------------------------------------------------------------------- the registry
def test_a_new_kind_is_one_registration(monkeypatch):
    """A kind declares its syntax, options, trees and loader in one place; the parser, the checks
    and the plan pick it up without another edit."""
    monkeypatch.setattr("specot.plan.draft._REGISTRY", dict(_REGISTRY))

    class Echo(DraftKind):
        name, syntax = "echo", "echo"

        def parse(self, text, options):
            return DraftSpec(self.name, text) if text == "echo" else None

        def tree_support(self, spec):
            return TreeSupport(laws=frozenset())

        def load(self, spec, target, *, dtype, device):
            return NGramDrafter()

    register_kind(Echo())
    assert P.parse_draft("echo").kind == "echo"
    assert P.make_plan("echo").describe() == "echo, chain"
    with pytest.raises(ValueError, match="needs a draft MODEL"):
        P.make_plan("echo", n=2)
    with pytest.raises(ValueError, match="already registered"):
        register_kind(type("Other", (Echo,), {})())


def test_unknown_names_list_the_syntax_of_every_kind(monkeypatch):
    monkeypatch.setattr("specot.plan.draft._REGISTRY", {k: v for k, v in _REGISTRY.items() if k != "model"})
    with pytest.raises(ValueError, match=r"unknown draft 'nope'; use one of: .*ngram.*suffix\+MODEL"):
        P.parse_draft("nope")


def test_tree_spec_objects_pass_through():
    spec = TreeSpec.sequences(2, 3, DraftLaw.WOR)
    assert P.make_plan("distilled", tree=spec).tree is spec


# --------------------------------------------------------------------------- backends
def _with_backend(monkeypatch, backend):
    """Install ``backend`` as if an extra had registered it under ``specot.backends``."""
    from types import SimpleNamespace

    import specot.plan.backends as B

    monkeypatch.setattr(B, "_entry_point_backends", lambda: {backend.name: SimpleNamespace(load=lambda: backend)})


def test_auto_picks_a_marked_backend_only_for_an_automatic_embedded_plan(monkeypatch):
    import specot.plan.backends as B
    from specot.plan import Backend
    from specot.plan.auto import AutoChoice, AutoTable

    own = AutoChoice("suffix", 1, 3, options=(("suffix_kappa", 0.1),))
    fast = Backend("fast", lambda *a, **k: None, auto=AutoTable(own, own), auto_default=True)
    _with_backend(monkeypatch, fast)
    plan = P.make_plan("auto", temperature=0)
    assert plan.backend == "fast" and plan.describe() == "suffix, budget 1 child × depth 3"  # the backend's own auto rule
    assert dict(plan.draft.options)["suffix_kappa"] == 0.1
    # anything less than a fully automatic plan of the embedded target on a CPU stays on transformers
    for kw in (dict(dtype="float32"), dict(draft="ngram"), dict(n=2), dict(verifier="block"),
               dict(verifier="speculative")):
        assert P.make_plan(**{"draft": "auto", **kw}).backend == "transformers", kw
    assert B.choose_backend("auto", None, device="cuda", dtype="auto", automatic=True) == "transformers"
    assert B.choose_backend("auto", "some/model", device="cpu", dtype="auto", automatic=True) == "transformers"
    assert P.make_plan("ngram", backend="fast").backend == "fast"  # named: used as named
    unavailable = Backend("fast", fast.load, auto=fast.auto, auto_default=True, available=lambda: False)
    _with_backend(monkeypatch, unavailable)
    assert P.make_plan("auto").backend == "transformers"  # not installed here: the reference backend


def test_load_drafter_auto_is_the_plans_auto_on_the_targets_backend(monkeypatch):
    """``load_drafter("auto", target)`` resolves through the plan: on a backend with its own table
    (llama.cpp's suffix chains) it gives that table's drafter, as ``generate(draft="auto")`` plans
    it — not the core's rule for the transformers backend."""
    import specot
    from specot.plan import Backend
    from specot.plan.auto import AutoChoice, AutoTable

    own = AutoChoice("suffix", 1, 5, options=(("suffix_kappa", 0.125), ("suffix_min_match", 3)))
    _with_backend(monkeypatch, Backend("fast", lambda *a, **k: None, auto=AutoTable(own, own)))
    target = tiny_lm(0)
    monkeypatch.setattr(target, "backend", "fast", raising=False)
    drafter = specot.load_drafter("auto", target)
    assert isinstance(drafter, SuffixDrafter) and (drafter.kappa, drafter.min_n) == (0.125, 3)
    plan = P.make_plan("auto", target=target)
    assert plan.draft.name == "suffix" and plan.shape == TreeBudget(1, 5)
    assert isinstance(specot.load_drafter("auto", tiny_lm(0)), NGramDrafter)  # transformers: the core's rule


def test_a_backend_without_hidden_states_refuses_eagle_before_loading(monkeypatch):
    from specot.plan import Backend

    _with_backend(monkeypatch, Backend("plain", lambda *a, **k: None))
    for draft in ("eagle", "suffix+eagle"):
        with pytest.raises(ValueError, match="reads the target's hidden states, which the plain backend"):
            P.make_plan(draft, backend="plain")
    assert P.make_plan("suffix", backend="plain").backend == "plain"
    with pytest.raises(ValueError, match="unknown backend 'nope'; installed: plain, transformers"):
        P.make_plan("ngram", backend="nope")


def test_a_loaded_target_runs_on_its_own_backend():
    target = tiny_lm(0)
    assert P.make_plan("ngram", target=target).backend == "transformers"
    with pytest.raises(ValueError, match="loaded on the transformers backend but backend 'llamacpp'"):
        P.make_plan("ngram", target=target, backend="llamacpp")


def test_the_suffix_drafter_prices_its_budget_with_the_targets_pass_cost():
    target = tiny_lm(0)
    plain = P.parse_draft("suffix", ngram_corpus="none").load(target)
    target.pass_cost = (0.55, 0.38)  # a backend whose wide passes cost much (llama.cpp on a CPU)
    priced = P.parse_draft("suffix", ngram_corpus="none", suffix_min_match=4, suffix_kappa=0.05).load(target)
    assert (plain.cost_fixed, plain.cost_per_token) == (0.05, 0.03)
    assert (priced.cost_fixed, priced.cost_per_token, priced.min_n, priced.kappa) == (0.55, 0.38, 4, 0.05)
    with pytest.raises(ValueError, match="suffix_min_match"):
        P.parse_draft("suffix", suffix_min_match=0)
    with pytest.raises(ValueError, match="suffix_kappa.*draft 'ngram'"):
        P.parse_draft("ngram", suffix_kappa=0.1)


def test_the_embedded_targets_declared_vocabulary_and_context_are_its_files():
    """The plan checks the embedded target against numbers declared beside the backends; they are
    the GGUF file's own (read here: the metadata takes seconds to parse, which the plan avoids)."""
    gguf = pytest.importorskip("gguf")
    from specot.models.embedded import embedded_gguf
    from specot.plan.backends import EMBEDDED_VOCAB_AND_CONTEXT, peek_vocab_and_context

    try:
        directory, name = embedded_gguf()
    except FileNotFoundError:
        pytest.skip("the embedded model's package is not installed")
    fields = gguf.GGUFReader(str(directory / name)).fields
    declared = tuple(int(fields[k].parts[fields[k].data[0]][0]) for k in ("llama.vocab_size", "llama.context_length"))
    assert declared == EMBEDDED_VOCAB_AND_CONTEXT == peek_vocab_and_context(None) == peek_vocab_and_context("smollm2")
