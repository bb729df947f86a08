"""Tree decoding engine on tiny random Llama models: greedy equivalence for every construction,
K = 1 equals the single-draft engine, EOS and max_new_tokens inside a tree, statistics, errors,
cache compaction, and the API / CLI options."""

from __future__ import annotations

import json

import pytest
import torch

from specot.api import generate
from specot.plan import make_plan
from specot.cli.main import main as cli_main
from specot.drafting import ModelDrafter
from specot.drafting.tree import EAGLE_DEFAULT_TREE, TreeSpec
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate, tree_generate
from specot.models import CausalLM
from specot.sampling import SamplingConfig

from model_helpers import tiny_lm

PROMPT = [1, 5, 3, 7]
GREEDY = SamplingConfig(temperature=0.0)

CONSTRUCTIONS = {
    "iid K=3 L=3": (TreeSpec.sequences(3, 3), "kseq"),
    "iid K=2 L=1": (TreeSpec.sequences(2, 1), "rrs"),
    "wor K=3 L=3": (TreeSpec.sequences(3, 3, "wor"), "rrs_wor"),
    "greedy K=4 L=2": (TreeSpec.sequences(4, 2, "greedy"), "greedy"),
    "prefix 2,2,1": (TreeSpec.prefix([2, 2, 1]), "kseq"),
    "wor 3,2": (TreeSpec.prefix([3, 2], "wor"), "rrs_wor"),
    "spechub 2,1,2": (TreeSpec.prefix([2, 1, 2], "spechub"), "spechub"),
    "eagle iid": (TreeSpec.topology(EAGLE_DEFAULT_TREE, "iid"), "rrs"),
    "eagle greedy": (TreeSpec.topology(EAGLE_DEFAULT_TREE, "greedy"), "greedy"),
    "K=1 L=4": (TreeSpec.sequences(1, 4), "speculative"),
    "wor K=20 > V": (TreeSpec.sequences(20, 2, "wor"), "rrs_wor"),
}


@pytest.mark.parametrize("name", list(CONSTRUCTIONS))
@pytest.mark.parametrize("drafter_kind", ["model", "self"])
def test_greedy_identical_to_autoregressive(name, drafter_kind):
    spec, ver = CONSTRUCTIONS[name]
    target = tiny_lm(0, dtype=torch.float32)
    draft = tiny_lm(1, dtype=torch.float32) if drafter_kind == "model" else CausalLM(target.model, name="self")
    cfg = GenerationConfig(max_new_tokens=21, sampling=GREEDY)
    ar = autoregressive_generate(target, PROMPT, cfg)
    tr = tree_generate(target, draft, PROMPT, spec, cfg, verifier=ver)
    assert tr.tokens == ar.tokens and len(tr.tokens) == 21
    st = tr.stats
    assert st.target_calls == st.iterations == len(st.tree_sizes) == len(st.accepted_lengths)
    if drafter_kind == "self":  # the draft is the target: every draft is accepted
        L = spec.depth
        assert st.accepted == sum(st.accepted_lengths) == 21 - st.iterations
        assert st.target_calls == -(-21 // (L + 1))
        assert max(st.tree_sizes) <= L  # temperature 0: all drafts of a node coincide (or support 1)


def test_k1_reproduces_the_single_draft_engine_draw_for_draw():
    target, draft = tiny_lm(0), tiny_lm(1)
    for gamma, sampling in [(3, SamplingConfig(1.0)), (2, SamplingConfig(0.7, top_k=6)), (5, SamplingConfig(1.0, top_p=0.8))]:
        cfg = GenerationConfig(max_new_tokens=30, gamma=gamma, sampling=sampling, seed=11)
        ref = speculative_generate(target, ModelDrafter(draft), PROMPT, cfg)
        tr = tree_generate(target, draft, PROMPT, TreeSpec.sequences(1, gamma), cfg, verifier="speculative")
        assert tr.tokens == ref.tokens
        assert (tr.stats.accepted, tr.stats.drafted, tr.stats.target_calls) == (
            ref.stats.accepted, ref.stats.drafted, ref.stats.target_calls)
        assert tr.stats.accepted_at == ref.stats.accepted_at and tr.stats.tried_at == ref.stats.tried_at


def test_eos_inside_a_tree():
    V = 8
    target = CausalLM(__import__("model_helpers").tiny_llama(0, vocab=V, eos=2), name="t")
    draft = tiny_lm(1, vocab=V)
    spec = TreeSpec.sequences(4, 4)
    hits = 0
    for seed in range(12):
        cfg = GenerationConfig(max_new_tokens=40, sampling=SamplingConfig(1.0), seed=seed)
        out = tree_generate(target, draft, PROMPT, spec, cfg, verifier="kseq").tokens
        if 2 in out:
            hits += 1
            assert out.index(2) == len(out) - 1  # EOS is emitted, nothing after it
        else:
            assert len(out) == 40
    assert hits >= 3
    cfg = GenerationConfig(max_new_tokens=40, sampling=SamplingConfig(1.0), seed=0, stop_at_eos=False)
    assert len(tree_generate(target, draft, PROMPT, spec, cfg, verifier="kseq").tokens) == 40


@pytest.mark.parametrize("max_new", [1, 2, 3, 5, 8])
def test_max_new_tokens_inside_a_tree(max_new):
    target = tiny_lm(0)
    self_draft = CausalLM(target.model, name="self")  # everything accepted: trees run to the budget
    cfg = GenerationConfig(max_new_tokens=max_new, sampling=SamplingConfig(1.0), seed=5)
    res = tree_generate(target, self_draft, PROMPT, TreeSpec.prefix([2, 2, 2]), cfg, verifier="kseq")
    assert len(res.tokens) == max_new
    assert res.stats.target_calls == -(-max_new // 4)
    assert target.cached_ids == (PROMPT + res.tokens)[: len(target.cached_ids)]


def test_caches_hold_only_the_committed_sequence():
    target, draft = tiny_lm(0), tiny_lm(1)
    cfg = GenerationConfig(max_new_tokens=25, sampling=SamplingConfig(1.0), seed=2)
    res = tree_generate(target, draft, PROMPT, TreeSpec.topology(EAGLE_DEFAULT_TREE, "wor"), cfg, verifier="rrs_wor")
    seq = PROMPT + res.tokens
    for m in (target, draft):
        assert m.tree_base is None
        assert m.cached_ids == seq[: len(m.cached_ids)] and len(m.cached_ids) >= len(seq) - 6
    st = res.stats
    assert st.draft_calls <= 5 * st.iterations  # one draft pass per depth
    assert len(st.tried_at) <= 5 and all(a <= t for a, t in zip(st.accepted_at, st.tried_at))
    d = st.to_dict()
    assert d["mean_tree_size"] > 1 and 0 <= d["overhead_share"] < 1 and d["block_efficiency"] >= 1


def test_invalid_pairs_raise_before_decoding():
    target, draft = tiny_lm(0), tiny_lm(1)
    cfg = GenerationConfig(max_new_tokens=5)
    for spec, ver in [(TreeSpec.sequences(3, 2), "speculative"), (TreeSpec.sequences(3, 2, "wor"), "kseq"),
                      (TreeSpec.sequences(3, 2), "rrs_wor"), (TreeSpec.sequences(3, 2, "greedy"), "rrs")]:
        with pytest.raises(ValueError, match="cannot be verified"):
            tree_generate(target, draft, PROMPT, spec, cfg, verifier=ver)
    assert target.forward_calls == 0 and draft.forward_calls == 0
    with pytest.raises(ValueError, match="share a KV cache"):
        tree_generate(target, target, PROMPT, TreeSpec.sequences(2, 2), cfg)
    with pytest.raises(ValueError, match="vocabulary"):
        tree_generate(target, tiny_lm(1, vocab=8), PROMPT, TreeSpec.sequences(2, 2), cfg)
    with pytest.raises(TypeError, match="draft model"):
        tree_generate(target, object(), PROMPT, TreeSpec.sequences(2, 2), cfg)  # type: ignore[arg-type]


def test_default_verifier_by_law():
    target, draft = tiny_lm(0), tiny_lm(1)
    cfg = GenerationConfig(max_new_tokens=6, sampling=SamplingConfig(1.0))
    for law in ("iid", "wor", "greedy"):
        assert len(tree_generate(target, draft, PROMPT, TreeSpec.sequences(3, 2, law), cfg).tokens) == 6


def test_api_and_cli_tree_options(tiny_model_dir, tmp_path, capsys):
    rep = generate("the cat sat", target=str(tiny_model_dir), draft=str(tiny_model_dir), n=3, gamma=2,
                   tree="wor", verifier="rrs_wor", max_new_tokens=8, chat=False, seed=1)
    assert rep.result.method == "tree" and len(rep.result.tokens) <= 8
    greedy = generate("the cat sat", target=str(tiny_model_dir), draft=str(tiny_model_dir), n=4,
                      verifier="greedy", temperature=0.0, max_new_tokens=8, chat=False, baseline=True)
    assert greedy.result.stats.to_dict()["mean_tree_size"] >= 1
    assert greedy.result.tokens == greedy.baseline.tokens  # type: ignore[union-attr]
    otm = generate("the cat", target=str(tiny_model_dir), draft=str(tiny_model_dir), tree="greedy:2,1",
                   verifier="otm", max_new_tokens=4, chat=False)
    assert otm.result.method == "tree"
    with pytest.raises(ValueError, match="draft MODEL"):
        generate("the cat", target=str(tiny_model_dir), draft="ngram", n=2, max_new_tokens=4, chat=False)
    single = generate("the cat", target=str(tiny_model_dir), draft=str(tiny_model_dir), max_new_tokens=4, chat=False)
    assert single.result.method == "speculative"  # no tree options: the single-draft engine
    topo = tmp_path / "tree.json"
    topo.write_text(json.dumps([[0], [1], [0, 0], [1, 0], [0, 0, 0]]))
    rc = cli_main(["generate", "--prompt", "the dog", "--target", str(tiny_model_dir), "--draft", str(tiny_model_dir),
                   "--tree", f"topology:{topo}", "--verifier", "rrs_wor", "--max-new-tokens", "6", "--raw", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["speculative"]["method"] == "tree" and "tree_sizes" in out["speculative"]["stats"]
    rc = cli_main(["generate", "--prompt", "the dog", "--target", str(tiny_model_dir), "--draft", str(tiny_model_dir),
                   "--drafts", "2", "--gamma", "3", "--tree", "prefix:2,1,1", "--verifier", "kseq",
                   "--max-new-tokens", "5", "--raw"])
    assert rc == 0 and "[tree] mean tree size" in capsys.readouterr().out
    rc = cli_main(["generate", "--prompt", "the", "--target", str(tiny_model_dir), "--draft", str(tiny_model_dir),
                   "--drafts", "2", "--tree", "wor", "--verifier", "kseq", "--raw"])
    assert rc == 1 and "cannot be verified by 'kseq'" in capsys.readouterr().err


@pytest.mark.parametrize("tree,law,expected", [("greedy", "greedy", "greedy"), ("wor", "wor", "rrs_wor"),
                                                (None, "iid", "kseq"), ("spechub", "spechub", "spechub")])
def test_a_tree_without_a_named_verifier_gets_its_laws_verifier(tree, law, expected):
    """The default verifier (``speculative``) takes one draft; a tree with n = 2 gets the verifier of
    its law instead, while a named verifier that cannot verify the tree is still refused."""
    drafter = ModelDrafter(tiny_lm(1))
    plan = make_plan(drafter, n=2, gamma=3, tree=tree)
    spec, ver = plan.tree, plan.verifier.build()
    assert spec.law.value == law and ver.name == expected
    spec.check_verifier(ver)
    if expected != "kseq":
        with pytest.raises(ValueError, match="cannot be verified by 'kseq'"):
            make_plan(drafter, verifier="kseq", n=2, gamma=3, tree=tree)
