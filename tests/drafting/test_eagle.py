"""Feature-level drafting (EAGLE-3 heads) on tiny random Llama targets."""

from __future__ import annotations

import json
import math

import pytest
import torch
import specot._validation as validation
from hypothesis import given, settings
from hypothesis import strategies as st

from specot.drafting import EAGLE_DEFAULT_TREE, EagleDrafter, TreeSpec
from specot.drafting.eagle import EAGLE3_KEYS, Eagle3Head, default_eagle_layers, rerank
from specot.drafting.eagle.head import _attend
from specot.engine import GenerationConfig, autoregressive_generate, make_generator, speculative_generate, tree_generate
from specot.laws import top_tokens
from specot.models.device import PrepackedLinear, prepacking_available
from specot.sampling import SamplingConfig

from model_helpers import tiny_lm
from engine_helpers import chi_square_pvalue, exact_joint

PROMPT = [1, 5, 3, 7]
GREEDY = SamplingConfig(temperature=0.0)
ALPHA = 1e-4
DRAFT_VOCAB = [1, 2, 3, 5, 7, 8, 9, 11, 12, 14]  # 10 of the 16 target tokens


def _target(vocab: int = 16, dtype=torch.float32):
    return tiny_lm(0, vocab=vocab, dtype=dtype, layers=4)


def _eagle(target, draft_vocab=DRAFT_VOCAB, seed: int = 1, **kw) -> EagleDrafter:
    return EagleDrafter.random(target, draft_vocab=draft_vocab, seed=seed, scale=5.0, **kw)


class _Recorder(EagleDrafter):
    """Records every tree and every outcome, and each tree's context and root draft logits."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.trees, self.outcomes, self.contexts, self.root_logits = [], [], [], []

    def propose(self, context, *a, **kw):
        tree = super().propose(context, *a, **kw)
        self.trees.append(tree)
        self.contexts.append(list(context))
        self.root_logits.append(None if self._last is None else self._last[0].clone())
        return tree

    def update(self, outcome):
        self.outcomes.append(outcome)
        super().update(outcome)


def _recorder(target, draft_vocab=DRAFT_VOCAB, **kw) -> _Recorder:
    base = _eagle(target, draft_vocab, **kw)
    rec = _Recorder(base.head, target)
    rec.dynamic, rec.children, rec.total_tokens, rec.width = base.dynamic, base.children, base.total_tokens, base.width
    rec.rerank, rec.min_confidence = base.rerank, base.min_confidence
    return rec


def test_default_layers():
    assert default_eagle_layers(32) == (2, 16, 29)
    assert default_eagle_layers(4) == (1, 2, 2)


@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("schedule", ["constant", "heuristic"])
def test_greedy_chain_identical_to_autoregressive(gamma, schedule):
    target = _target()
    cfg = GenerationConfig(max_new_tokens=32, gamma=gamma, sampling=GREEDY, gamma_schedule=schedule)
    ar = autoregressive_generate(target, PROMPT, cfg)
    sd = speculative_generate(target, _eagle(target), PROMPT, cfg)
    assert sd.tokens == ar.tokens
    assert sd.stats.drafted > 0


@pytest.mark.parametrize("dynamic,rerank_on", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("law,verifier", [("greedy", "greedy"), ("wor", "rrs_wor"), ("iid", "kseq")])
def test_greedy_tree_identical_to_autoregressive(dynamic, rerank_on, law, verifier):
    target = _target()
    cfg = GenerationConfig(max_new_tokens=32, sampling=GREEDY)
    ar = autoregressive_generate(target, PROMPT, cfg)
    spec = TreeSpec.topology(EAGLE_DEFAULT_TREE, law)
    tr = tree_generate(target, _eagle(target, dynamic=dynamic, rerank=rerank_on), PROMPT, spec, cfg, verifier=verifier)
    assert tr.tokens == ar.tokens
    assert max(tr.stats.tree_sizes) > spec.depth  # a real tree (several children per node), not a chain


@pytest.mark.parametrize("drafts", [1, 2])
def test_min_confidence_shortens_drafts_and_keeps_greedy_exact(drafts):
    """τ close to 1 stops expanding after the first draft token almost always (a path's cumulative
    draft probability falls below τ); τ never changes what is committed."""
    target = _target()
    cfg = GenerationConfig(max_new_tokens=32, gamma=4, sampling=GREEDY, stop_at_eos=False)
    ar = autoregressive_generate(target, PROMPT, cfg)
    depths = {}
    for tau in (None, 0.999):
        rec = _recorder(target)
        rec.min_confidence = tau
        if drafts == 1:
            res = speculative_generate(target, rec, PROMPT, cfg)
        else:
            res = tree_generate(target, rec, PROMPT, TreeSpec.sequences(2, 4, "greedy"), cfg, verifier="greedy")
        assert res.tokens == ar.tokens
        depths[tau] = [t.depth for t in rec.trees if t.size]
    assert max(depths[None]) >= 3
    assert sum(depths[0.999]) < sum(depths[None])
    with pytest.raises(ValueError, match="min_confidence"):
        _eagle(target, min_confidence=1.5)


def test_full_draft_vocabulary_and_dynamic_budget():
    target = _target()
    cfg = GenerationConfig(max_new_tokens=24, sampling=GREEDY)
    ar = autoregressive_generate(target, PROMPT, cfg)
    dr = _recorder(target, draft_vocab=None, children=3, total_tokens=9)
    spec = TreeSpec.prefix([4, 4, 4, 4], "greedy")
    tr = tree_generate(target, dr, PROMPT, spec, cfg, verifier="greedy")
    assert tr.tokens == ar.tokens
    assert max(tr.stats.tree_sizes) <= 9
    assert all(len(d) <= 3 for t in dr.trees for d in t.drafts.values())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10 ** 6), st.sampled_from([0.0, -0.5, -1.0, -2.0]) | st.floats(-8.0, 0.0)),
                min_size=0, max_size=30),
       st.integers(0, 35))
def test_rerank_keeps_the_most_confident_nodes_as_a_tree(nodes, budget):
    parents, score = [-1], [0.0]
    for i, (pick, lp) in enumerate(nodes):
        par = pick % (i + 1)  # any earlier node: parents precede children
        parents.append(par)
        score.append(score[par] + lp)
    keep = rerank(score, budget)
    assert keep == sorted(set(keep)) and 0 not in keep
    assert len(keep) == min(budget, len(nodes))
    kept = set(keep) | {0}
    assert all(parents[nd] in kept for nd in keep)  # closed under parents: a tree
    if keep:  # nothing left out scores above anything kept
        assert max((score[nd] for nd in range(1, len(score)) if nd not in kept), default=-math.inf) <= min(
            score[nd] for nd in keep)


def test_reranked_trees_are_deterministic_greedy_trees_within_the_budget():
    """EAGLE-2 re-ranking (temperature 0): deterministic children (q on them only, strictly
    decreasing), top-k at most, the node budget, and deeper trees than spending the budget during
    expansion; at T > 0 the sampled construction is kept (no deterministic trees)."""
    target = _target()
    dr = _recorder(target, children=3, total_tokens=7)
    tree_generate(target, dr, PROMPT, TreeSpec.prefix([3, 3, 3, 3], "greedy"),
                  GenerationConfig(max_new_tokens=12, sampling=SamplingConfig(1.0), seed=4), verifier="greedy")
    assert dr.trees and not any(t.deterministic for t in dr.trees)
    cfg = GenerationConfig(max_new_tokens=24, sampling=GREEDY)
    spec = TreeSpec.prefix([3, 3, 3, 3], "greedy")
    depth = {}
    for rerank_on in (True, False):
        dr = _recorder(target, children=3, total_tokens=7, rerank=rerank_on)
        tree_generate(target, dr, PROMPT, spec, cfg, verifier="greedy")
        trees = [t for t in dr.trees if t.size > 0]
        assert trees and all(t.size <= 7 and t.law.value == "greedy" and t.deterministic == rerank_on for t in trees)
        _check_trees(dr, target)
        depth[rerank_on] = sum(t.depth for t in trees) / len(trees)
        if rerank_on:
            for t in trees:
                for node, drafts in t.drafts.items():
                    row = t.q[t.q_row[node]].cpu()
                    assert int((row > 0).sum()) == len(drafts)  # deterministic: q lives on the children
                    w = row[drafts]
                    assert bool((w[1:] < w[:-1]).all())  # strictly decreasing in draft order
    assert depth[True] > depth[False]


def _check_trees(dr: _Recorder, target) -> None:
    image = torch.zeros(target.vocab_size, dtype=torch.bool)
    image[dr.head.target_ids().cpu()] = True
    for tree in dr.trees:
        if tree.size == 0:
            continue
        q = tree.q.cpu().double()
        assert torch.allclose(q.sum(-1), torch.ones(q.shape[0], dtype=q.dtype), atol=1e-5)
        assert float(q[:, ~image].abs().max()) == 0.0
        assert all(image[t] for t in tree.tokens[1:])
        for node, drafts in tree.drafts.items():
            row = q[tree.q_row[node]]
            assert all(row[t] > 0 for t in drafts)  # every draft was drawn from q
            if tree.law.value == "greedy" and len(drafts) > 1:
                assert drafts[:-1] == top_tokens(row[None], len(drafts) - 1)[0].tolist()
            if tree.law.value in ("greedy", "wor"):
                assert len(set(drafts)) == len(drafts)


@pytest.mark.parametrize("law,verifier", [("greedy", "greedy"), ("wor", "rrs_wor"), ("iid", "kseq")])
def test_q_rows_are_distributions_on_the_draft_vocabulary(law, verifier):
    target = _target()
    dr = _recorder(target)
    cfg = GenerationConfig(max_new_tokens=20, sampling=SamplingConfig(1.0), seed=3)
    tree_generate(target, dr, PROMPT, TreeSpec.topology(EAGLE_DEFAULT_TREE, law), cfg, verifier=verifier)
    assert len(dr.trees) > 1
    _check_trees(dr, target)
    assert all(t.law.value == law for t in dr.trees if t.size > 0)


@pytest.mark.parametrize("law,verifier", [("wor", "rrs_wor"), ("iid", "kseq")])
def test_drafting_runs_no_value_checks_on_its_own_laws(monkeypatch, law, verifier):
    """q comes from standardize (or a mixture of such laws): checking its values again costs a
    device sync per depth on CUDA. The samplers inside propose must skip them."""
    target = _target()
    dr = _recorder(target)
    inside = []
    real_check, real_propose = validation.check_prob_values, dr.propose

    def check(p, name):
        inside.append(getattr(dr, "_in_propose", False))
        return real_check(p, name)

    def propose(*a, **k):
        dr._in_propose = True
        try:
            return real_propose(*a, **k)
        finally:
            dr._in_propose = False

    monkeypatch.setattr(validation, "check_prob_values", check)
    dr.propose = propose
    cfg = GenerationConfig(max_new_tokens=20, sampling=SamplingConfig(1.0), seed=3)
    tree_generate(target, dr, PROMPT, TreeSpec.topology(EAGLE_DEFAULT_TREE, law), cfg, verifier=verifier)
    assert sum(t.size > 1 for t in dr.trees) > 2 and not any(inside)
    _check_trees(dr, target)  # the q rows are still distributions on the draft vocabulary


def test_q_rows_chain_and_top_k():
    target = _target()
    dr = _recorder(target)
    cfg = GenerationConfig(max_new_tokens=20, gamma=3, sampling=SamplingConfig(0.8, top_k=3), seed=5)
    speculative_generate(target, dr, PROMPT, cfg)
    _check_trees(dr, target)
    assert all(int((t.q > 0).sum(-1).max()) <= 3 for t in dr.trees if t.q is not None)


@torch.no_grad()
def _target_features(target, seq: list[int], layers) -> torch.Tensor:
    out = target.model(input_ids=torch.tensor([seq]), output_hidden_states=True)
    return torch.cat([out.hidden_states[i][0] for i in layers], dim=-1)


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("tree", [False, True])
def test_hidden_states_arrive_with_the_right_positions(tree, num_layers):
    target = _target()
    dr = _recorder(target, num_layers=num_layers)
    cfg = GenerationConfig(max_new_tokens=30, gamma=3, sampling=SamplingConfig(1.0), seed=11, stop_at_eos=False)
    if tree:
        res = tree_generate(target, dr, PROMPT, TreeSpec.topology(EAGLE_DEFAULT_TREE, "greedy"), cfg, verifier="greedy")
    else:
        res = speculative_generate(target, dr, PROMPT, cfg)
    seq = PROMPT + res.tokens
    full = _target_features(target, seq, dr.hidden_layers)  # [len(seq), 3H]
    assert dr.hidden_layers == (1, 2, 2)
    covered = 0
    for out in dr.outcomes:
        h = out.hidden_states
        assert h is not None and h.shape[1] == 3 * target.model.config.hidden_size
        assert out.hidden_start == covered  # contiguous: no position skipped or repeated
        n_valid = out.context_len + len(out.tokens) - 1 - out.hidden_start  # committed, run through the target
        assert h.shape[0] >= n_valid
        torch.testing.assert_close(h[:n_valid], full[out.hidden_start: out.hidden_start + n_valid], atol=1e-4, rtol=1e-4)
        covered = out.hidden_start + n_valid
    assert covered == len(seq) - 1
    # the drafter's stored features and committed KV cache equal a teacher-forced pass over the sequence
    n = dr._fend
    torch.testing.assert_close(dr._feats, full[:n].to(dr._feats.dtype), atol=1e-4, rtol=1e-4)
    kend = dr._kend
    ids = torch.tensor(seq[1:kend])
    _, h_tf = dr.head.forward_sequence(ids, full[: kend - 1])
    pk, pv = dr.head.empty_kv()
    T = len(ids)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    _, _, k, v = dr.head.step(ids, full[: kend - 1], torch.arange(T), pk, pv, mask, fused=True)
    torch.testing.assert_close(dr._k, k, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dr._v, v, atol=1e-4, rtol=1e-4)


def test_drafts_accepted_with_the_targets_own_features():
    """A head built to predict the target (a copy of the target's last layer cannot be loaded into
    EAGLE's layout, so use a self-consistent check instead): the acceptance statistics are those
    of a real speculative run — some drafts are accepted at T=1 on a small vocabulary."""
    target = _target(vocab=8)
    dr = _eagle(target, draft_vocab=[0, 1, 2, 4, 5, 7])
    cfg = GenerationConfig(max_new_tokens=40, gamma=3, sampling=SamplingConfig(1.0), seed=2, stop_at_eos=False)
    res = speculative_generate(target, dr, PROMPT, cfg)
    assert res.stats.accepted > 0
    assert len(res.tokens) == 40


PROMPT6 = [1, 5, 3, 2]


def _samples(target, drafter, spec, verifier, n, length, seed=1234):
    gen = make_generator(seed)
    cfg = GenerationConfig(max_new_tokens=length, gamma=3, sampling=SamplingConfig(1.0), stop_at_eos=False)
    out = []
    for _ in range(n):
        if spec is None:
            r = speculative_generate(target, drafter, PROMPT6, cfg, generator=gen)
        else:
            r = tree_generate(target, drafter, PROMPT6, spec, cfg, verifier=verifier, generator=gen)
        out.append(tuple(r.tokens))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["chain", "greedy", "wor", "iid", "static_iid", "sharp_chain", "sharp_greedy",
                                  "deep_chain", "deep_greedy", "int8_chain", "int8_greedy"])
def test_sampling_is_lossless_chi_square(kind):
    """Empirical law of 4-token continuations == the exact autoregressive joint, with a reduced draft
    vocabulary (4 of 6 tokens): chains, EAGLE-2 dynamic trees under each law, a static i.i.d.
    prefix tree (equal draws merge, the merged node drafting for all its slots), a sharpened
    draft law (``q_temperature_ratio=0.5``), a two-layer head (``deep_``) and an int8-weight head
    (``int8_``). The first iteration is a plain target step (no features yet), the second drafts
    up to 2 deep."""
    V, L = 6, 4
    target = _target(vocab=V)
    dr = _eagle(target, draft_vocab=[0, 1, 3, 4], seed=2, dynamic=not kind.startswith("static"),
                q_temperature_ratio=0.5 if kind.startswith("sharp") else 1.0,
                num_layers=2 if kind.startswith("deep") else 1, int8=kind.startswith("int8"))
    kind = kind.split("_")[-1]
    assert dr.head.draft_vocab_size < V
    exact = exact_joint(target.model, PROMPT6, L, SamplingConfig(1.0))
    if kind == "chain":
        samples = _samples(target, dr, None, None, 2000, L)
    else:
        spec = TreeSpec.prefix([3, 2, 2], kind)
        verifier = {"greedy": "greedy", "wor": "rrs_wor", "iid": "kseq"}[kind]
        samples = _samples(target, dr, spec, verifier, 2000, L)
    assert chi_square_pvalue(samples, exact) > ALPHA


def test_q_temperature_ratio_sharpens_q_at_positive_temperature_only(tmp_path):
    target = _target()
    dr = _eagle(target, q_temperature_ratio=0.5)
    z = torch.randn(3, len(DRAFT_VOCAB))
    ids = torch.tensor(DRAFT_VOCAB)
    for T in (1.0, 0.7):
        q = dr.draft_distribution(z, SamplingConfig(T))
        assert q.shape == (3, target.vocab_size)
        torch.testing.assert_close(q[:, ids], torch.softmax(z / (0.5 * T), dim=-1))
        assert float(q.sum(-1).sub(1).abs().max()) < 1e-5 and int((q > 0).sum()) == 3 * len(DRAFT_VOCAB)
    same = _eagle(target).draft_distribution(z, GREEDY)
    assert torch.equal(dr.draft_distribution(z, GREEDY), same)  # temperature 0: the argmax, whatever the ratio
    # the checkpoint carries the calibration; an explicit argument wins; published heads default to 1
    dr.head.save_pretrained(tmp_path)
    assert EagleDrafter.from_pretrained(tmp_path, target).q_temperature_ratio == 1.0
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "specot_q_temperature_ratio": 0.8}))
    assert EagleDrafter.from_pretrained(tmp_path, target).q_temperature_ratio == 0.8
    assert EagleDrafter.from_pretrained(tmp_path, target, q_temperature_ratio=0.6).q_temperature_ratio == 0.6
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="q_temperature_ratio"):
            _eagle(target, q_temperature_ratio=bad)


# ---------------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip_in_the_published_layout(tmp_path):
    target = _target()
    dr = _eagle(target)
    dr.head.save_pretrained(tmp_path)
    from safetensors.torch import load_file

    state = load_file(str(tmp_path / "model.safetensors"))
    assert set(state) == set(EAGLE3_KEYS)  # the target's embedding is shared, not saved
    H = target.model.config.hidden_size
    assert tuple(state["fc.weight"].shape) == (H, 3 * H)
    assert state["midlayer.self_attn.q_proj.weight"].shape[1] == 2 * H
    assert tuple(state["lm_head.weight"].shape) == (len(DRAFT_VOCAB), H)
    assert state["d2t"].dtype == torch.int64 and state["t2d"].dtype == torch.bool
    assert (torch.arange(len(DRAFT_VOCAB)) + state["d2t"]).tolist() == DRAFT_VOCAB  # target = draft + d2t[draft]
    assert state["t2d"].nonzero().reshape(-1).tolist() == DRAFT_VOCAB
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["draft_vocab_size"] == len(DRAFT_VOCAB) and cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2, 2]

    loaded = EagleDrafter.from_pretrained(tmp_path, target)
    for k, v in dr.head.checkpoint_state().items():
        assert torch.equal(loaded.head.checkpoint_state()[k], v), k
    assert loaded.hidden_layers == dr.hidden_layers
    feats = torch.randn(5, 3 * H)
    toks = torch.tensor([1, 2, 3, 4, 5])
    torch.testing.assert_close(loaded.head.forward_sequence(toks, feats)[0], dr.head.forward_sequence(toks, feats)[0])

    cfg_g = GenerationConfig(max_new_tokens=16, gamma=3, sampling=GREEDY)
    a = speculative_generate(target, dr, PROMPT, cfg_g)
    b = speculative_generate(target, loaded, PROMPT, cfg_g)
    assert a.tokens == b.tokens and a.stats.accepted_lengths == b.stats.accepted_lengths

    from specot.api import load_drafter

    via_api = load_drafter(f"eagle:{tmp_path}", target)
    assert isinstance(via_api, EagleDrafter)


def test_loading_a_checkpoint_draws_no_random_weights(tmp_path, monkeypatch):
    """Every weight of a loaded head comes from its checkpoint, so building the modules skips their
    random initialization (transformers' no_init_weights): 40 ms of the shipped head's load."""
    target = _target()
    dr = _eagle(target)
    dr.head.save_pretrained(tmp_path)
    calls: list[str] = []
    for name in ("kaiming_uniform_", "uniform_", "normal_"):
        real = getattr(torch.nn.init, name)

        def spy(*a, _real=real, _name=name, **k):
            calls.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(torch.nn.init, name, spy)
    loaded = EagleDrafter.from_pretrained(tmp_path, target)
    assert calls == []
    for k, v in dr.head.checkpoint_state().items():
        assert torch.equal(loaded.head.checkpoint_state()[k], v), k


def _speculators_checkpoint(path, dr, *, kind: str = "eagle3", fc_bias=None, extra=None,
                            layer_type: str = "llama") -> None:
    """``dr``'s head written in vLLM's ``speculators`` layout (config nested under
    ``transformer_layer_config``, EAGLE-3 fields at the top level, ``layers.0.*`` weights)."""
    from safetensors.torch import save_file

    layer_cfg = {k: v for k, v in dr.head.config.to_dict().items()
                 if k not in ("draft_vocab_size", "eagle_config", "architectures")}
    layer_cfg["model_type"] = layer_type
    obj = {"architectures": ["Eagle3Speculator"], "speculators_model_type": kind,
           "transformer_layer_config": layer_cfg, "draft_vocab_size": dr.head.draft_vocab_size,
           "norm_before_residual": False, "target_hidden_size": None,
           "eagle_aux_hidden_state_layer_ids": list(dr.hidden_layers),
           "speculators_config": {"algorithm": kind, "default_proposal_method": "greedy",
                                  "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                  "verifier": {"name_or_path": "tiny", "architectures": ["LlamaForCausalLM"]}}}
    state = {("layers.0." + k.removeprefix("midlayer.")) if k.startswith("midlayer.") else k: v.contiguous()
             for k, v in dr.head.checkpoint_state().items()}
    if fc_bias is not None:
        state["fc.bias"] = fc_bias
    state.update(extra or {})
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(obj, default=str))
    save_file(state, str(path / "model.safetensors"))


def test_checkpoint_in_the_speculators_layout(tmp_path):
    """vLLM also serves EAGLE-3 heads saved by its ``speculators`` library: the same weights under
    ``layers.0.*``, the decoder layer's config under ``transformer_layer_config``, and in some heads
    an ``fc`` with a bias. All of it is read, and the bias is applied, not dropped."""
    target = _target()
    dr = _eagle(target, layers=(1, 3, 4))
    H = target.model.config.hidden_size
    bias = torch.randn(H, generator=torch.Generator().manual_seed(3))
    _speculators_checkpoint(tmp_path / "plain", dr)
    _speculators_checkpoint(tmp_path / "biased", dr, fc_bias=bias)

    plain = EagleDrafter.from_pretrained(tmp_path / "plain", target)
    assert plain.hidden_layers == (1, 3, 4) and plain.head.draft_vocab_size == len(DRAFT_VOCAB)
    for k, v in dr.head.checkpoint_state().items():
        assert torch.equal(plain.head.checkpoint_state()[k], v), k
    cfg_g = GenerationConfig(max_new_tokens=16, gamma=3, sampling=GREEDY)
    a, b = speculative_generate(target, dr, PROMPT, cfg_g), speculative_generate(target, plain, PROMPT, cfg_g)
    assert a.tokens == b.tokens and a.stats.accepted_lengths == b.stats.accepted_lengths

    biased = EagleDrafter.from_pretrained(tmp_path / "biased", target)
    feats = torch.randn(5, 3 * H, generator=torch.Generator().manual_seed(4))
    toks = torch.tensor([1, 2, 3, 4, 5])
    ref = dr.head.forward_sequence(toks, feats)[0]
    assert not torch.allclose(biased.head.forward_sequence(toks, feats)[0], ref)  # the bias is used
    torch.testing.assert_close(biased.head.fc.bias.detach(), bias)
    with torch.no_grad():
        biased.head.fc.bias.zero_()  # without it, the head is the original one
    torch.testing.assert_close(biased.head.forward_sequence(toks, feats)[0], ref)
    # greedy decoding with the biased head is still autoregressive decoding, also with int8 weights
    # (a biased fc stays in full precision)
    want = autoregressive_generate(target, PROMPT, cfg_g).tokens
    for int8 in (False, True):
        head = EagleDrafter.from_pretrained(tmp_path / "biased", target, int8=int8)
        assert isinstance(head.head.fc, torch.nn.Linear) and head.head.fc.bias is not None
        assert speculative_generate(target, head, PROMPT, cfg_g).tokens == want

    _speculators_checkpoint(tmp_path / "eagle1", dr, kind="eagle")
    with pytest.raises(ValueError, match="type 'eagle'.*EAGLE-3"):
        EagleDrafter.from_pretrained(tmp_path / "eagle1", target)
    obj = json.loads((tmp_path / "plain" / "config.json").read_text())
    del obj["transformer_layer_config"]
    (tmp_path / "plain" / "config.json").write_text(json.dumps(obj))
    with pytest.raises(ValueError, match="transformer_layer_config"):
        EagleDrafter.from_pretrained(tmp_path / "plain", target)


def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def test_speculators_qwen3_layers_and_input_norm(tmp_path):
    """Heads that ``speculators`` trains for Qwen3 targets normalise each head's queries and keys
    before the rotation (``self_attn.q_norm`` / ``k_norm``), and ``norm_before_fc`` heads normalise
    the fused features before ``fc`` (``input_norm.weight``). Both are read and applied exactly as
    written here by hand; a layer type specot's layer does not compute is refused."""
    target = _target()
    dr = _eagle(target)
    H = target.model.config.hidden_size
    att = dr.head.midlayer.self_attn
    d, eps = att.head_dim, dr.head.config.rms_norm_eps
    g = torch.Generator().manual_seed(8)
    qn, kn, inn = (1 + torch.rand(d, generator=g), 1 + torch.rand(d, generator=g), 1 + torch.rand(3 * H, generator=g))
    _speculators_checkpoint(tmp_path / "qwen3", dr, layer_type="qwen3", extra={
        "layers.0.self_attn.q_norm.weight": qn, "layers.0.self_attn.k_norm.weight": kn, "input_norm.weight": inn})
    head = EagleDrafter.from_pretrained(tmp_path / "qwen3", target).head

    feats = torch.randn(4, 3 * H, generator=g)
    torch.testing.assert_close(head.fuse(feats), dr.head.fc(_rms(feats, inn, eps)))
    x = torch.randn(4, 2 * H, generator=g)
    pos = torch.arange(4)
    cos, sin = (t[0] for t in head.rotary(x, pos[None]))
    q, k, v = head.midlayer.self_attn.project(x, cos, sin)
    q0 = _rms(att.q_proj(x).view(4, att.num_heads, d), qn, eps).transpose(0, 1)
    k0 = _rms(att.k_proj(x).view(4, att.num_kv, d), kn, eps).transpose(0, 1)
    rot = lambda t: torch.cat([-t[..., d // 2:], t[..., : d // 2]], -1)  # noqa: E731 - Llama's rotate_half
    torch.testing.assert_close(q, q0 * cos + rot(q0) * sin)
    torch.testing.assert_close(k, k0 * cos + rot(k0) * sin)
    torch.testing.assert_close(v, att.v_proj(x).view(4, att.num_kv, d).transpose(0, 1))
    cfg_g = GenerationConfig(max_new_tokens=12, gamma=3, sampling=GREEDY)
    assert speculative_generate(target, EagleDrafter.from_pretrained(tmp_path / "qwen3", target, int8=True),
                                PROMPT, cfg_g).tokens == autoregressive_generate(target, PROMPT, cfg_g).tokens

    _speculators_checkpoint(tmp_path / "oss", dr, layer_type="gpt_oss")
    with pytest.raises(ValueError, match="'gpt_oss'"):
        EagleDrafter.from_pretrained(tmp_path / "oss", target)


def test_norm_before_residual_takes_the_normed_feature_as_residual(tmp_path):
    """``norm_before_residual`` (heads trained by ``speculators``, e.g. for Qwen3 targets): the
    residual of the first layer is ``hidden_norm(f)`` instead of ``f``. With the MLP's output zeroed
    the layer returns residual + attention, so the two settings differ by exactly hidden_norm(f) − f;
    the flag is read from a speculators config's top level."""
    target = _target()
    dr = _eagle(target)
    layer = dr.head.midlayer
    with torch.no_grad():
        layer.mlp.down_proj.weight.zero_()
    H = target.model.config.hidden_size
    g = torch.Generator().manual_seed(6)
    emb, feat = torch.randn(3, H, generator=g), torch.randn(3, H, generator=g)
    cos, sin = dr.head.rotary(feat, torch.arange(3)[None])
    pk, pv = dr.head.empty_kv()
    mask = torch.ones(3, 3, dtype=torch.bool).tril()
    outs = {}
    for flag in (False, True):
        layer.norm_before_residual = flag
        outs[flag] = layer(emb, feat, cos[0], sin[0], pk[0], pv[0], mask)[0]
    torch.testing.assert_close(outs[True] - outs[False], layer.hidden_norm(feat) - feat)

    layer.norm_before_residual = False
    _speculators_checkpoint(tmp_path, dr)
    obj = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**obj, "norm_before_residual": True}))
    assert EagleDrafter.from_pretrained(tmp_path, target).head.midlayer.norm_before_residual
    assert not dr.head.midlayer.norm_before_residual


def _deep_keys() -> set[str]:
    sub = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "input_layernorm",
           "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    return {f"layers.1.{m}.weight" for m in sub}


def test_deeper_head_round_trip_and_greedy_exact(tmp_path):
    """A two-layer head (``num_hidden_layers=2``): layer 1 is a plain H-wide decoder layer saved as
    ``layers.1.*``; it loads back with the same outputs, also when layer 0 is named ``layers.0.*``
    (vLLM's name for ``midlayer``); greedy chains and dynamic trees equal autoregressive decoding."""
    from safetensors.torch import load_file, save_file

    target = _target()
    dr = _eagle(target, num_layers=2)
    H = target.model.config.hidden_size
    assert dr.head.num_layers == 2 and dr.head.layers["1"].self_attn.q_proj.in_features == H
    assert tuple(dr.head.empty_kv()[0].shape[:1]) == (2,)
    dr.head.save_pretrained(tmp_path / "a")
    state = load_file(str(tmp_path / "a" / "model.safetensors"))
    assert set(state) == set(EAGLE3_KEYS) | _deep_keys()
    feats, toks = torch.randn(5, 3 * H), torch.tensor([1, 2, 3, 4, 5])
    want = dr.head.forward_sequence(toks, feats)[0]
    renamed = {k.replace("midlayer.", "layers.0."): v for k, v in state.items()}
    (tmp_path / "b").mkdir()
    save_file(renamed, str(tmp_path / "b" / "model.safetensors"))
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    (tmp_path / "b" / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 4}))  # weights decide
    for d in ("a", "b"):
        loaded = EagleDrafter.from_pretrained(tmp_path / d, target)
        assert loaded.head.num_layers == 2
        torch.testing.assert_close(loaded.head.forward_sequence(toks, feats)[0], want)
    one = _eagle(target)
    assert not torch.allclose(one.head.forward_sequence(toks, feats)[0], want)  # layer 1 changes the output
    cfg_g = GenerationConfig(max_new_tokens=32, gamma=3, sampling=GREEDY)
    ar = autoregressive_generate(target, PROMPT, cfg_g)
    assert speculative_generate(target, dr, PROMPT, cfg_g).tokens == ar.tokens
    spec = TreeSpec.topology(EAGLE_DEFAULT_TREE, "greedy")
    for rerank_on in (True, False):
        tr = tree_generate(target, _eagle(target, num_layers=2, rerank=rerank_on), PROMPT, spec, cfg_g, verifier="greedy")
        assert tr.tokens == ar.tokens


def test_int8_head_drafts_what_it_computes_and_stays_greedy_exact(tmp_path):
    """``int8=True`` (how the shipped head runs on a CPU): every linear layer becomes an Int8Linear, the logits stay close
    to the float head's, greedy chains and trees equal autoregressive decoding, ``from_pretrained``
    reads ``specot_int8_weights`` (an explicit argument wins) and a quantized head refuses to save."""
    from specot.models.int8 import Int8Linear

    target = _target()
    dr, dq = _eagle(target, num_layers=2), _eagle(target, num_layers=2, int8=True)
    assert dq.head.int8 and not dr.head.int8
    linears = [m for m in dq.head.modules() if isinstance(m, (Int8Linear, torch.nn.Linear))]
    assert len(linears) == 1 + 7 + 7 + 1 and all(isinstance(m, Int8Linear) for m in linears)
    H = target.model.config.hidden_size
    feats, toks = torch.randn(6, 3 * H), torch.tensor([1, 2, 3, 4, 5, 6])
    with torch.no_grad():
        zf, zq = dr.head.forward_sequence(toks, feats)[0], dq.head.forward_sequence(toks, feats)[0]
    assert float((zf - zq).abs().max()) < 0.05 * float(zf.abs().max())
    cfg_g = GenerationConfig(max_new_tokens=32, gamma=3, sampling=GREEDY)
    ar = autoregressive_generate(target, PROMPT, cfg_g)
    assert speculative_generate(target, dq, PROMPT, cfg_g).tokens == ar.tokens
    spec = TreeSpec.topology(EAGLE_DEFAULT_TREE, "greedy")
    assert tree_generate(target, _eagle(target, int8=True), PROMPT, spec, cfg_g, verifier="greedy").tokens == ar.tokens
    with pytest.raises(RuntimeError, match="int8"):
        dq.head.save_pretrained(tmp_path / "q")
    dr.head.save_pretrained(tmp_path)
    assert not EagleDrafter.from_pretrained(tmp_path, target).head.int8
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "specot_int8_weights": True}))
    # the flag applies on a CPU except to float32 heads that oneDNN prepacks (int8 is slow with float32 activations)
    assert EagleDrafter.from_pretrained(tmp_path, _target(dtype=torch.float64)).head.int8
    flagged = EagleDrafter.from_pretrained(tmp_path, target)
    assert flagged.head.int8 is not prepacking_available(torch.float32)
    assert not any(isinstance(m, PrepackedLinear) for m in flagged.head.modules())  # tiny layers: F.linear is faster
    assert EagleDrafter.from_pretrained(tmp_path, target, int8=True).head.int8
    assert not EagleDrafter.from_pretrained(tmp_path, target, int8=False).head.int8


def test_checkpoint_with_its_own_embedding_and_bin_weights(tmp_path):
    """EAGLE's own releases ship ``pytorch_model.bin``; some heads carry ``embed_tokens.weight``."""
    target = _target()
    dr = _eagle(target)
    state = dict(dr.head.checkpoint_state())
    state["embed_tokens.weight"] = torch.randn(target.vocab_size, target.model.config.hidden_size)
    cfg = dr.head.config.to_dict()
    cfg["draft_vocab_size"] = len(DRAFT_VOCAB)
    (tmp_path / "config.json").write_text(json.dumps(cfg, default=str))
    torch.save(state, tmp_path / "pytorch_model.bin")
    loaded = EagleDrafter.from_pretrained(tmp_path, target)
    assert loaded.head.embed_tokens is not None
    assert torch.equal(loaded.head.embed_tokens.weight, state["embed_tokens.weight"])
    out = speculative_generate(target, loaded, PROMPT, GenerationConfig(max_new_tokens=8, gamma=2, sampling=GREEDY))
    assert out.tokens == autoregressive_generate(target, PROMPT, GenerationConfig(max_new_tokens=8, sampling=GREEDY)).tokens


def test_checkpoint_errors(tmp_path):
    target = _target()
    dr = _eagle(target)
    dr.head.save_pretrained(tmp_path / "ok")
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        EagleDrafter.from_pretrained(tmp_path / "ok", _target(vocab=20))
    from safetensors.torch import load_file, save_file

    state = load_file(str(tmp_path / "ok" / "model.safetensors"))
    del state["midlayer.mlp.up_proj.weight"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
    save_file(state, str(tmp_path / "bad" / "model.safetensors"))
    with pytest.raises(ValueError, match="up_proj"):
        EagleDrafter.from_pretrained(tmp_path / "bad", target)
    with pytest.raises(FileNotFoundError):
        EagleDrafter.from_pretrained(tmp_path / "missing", target)
    head = Eagle3Head(dr.head.config)
    with pytest.raises(ValueError, match="distinct"):
        head.set_draft_vocab([1] * len(DRAFT_VOCAB))


# ---------------------------------------------------------------------------- training (a smoke test)
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A head trained for a few steps on text sampled from the tiny target, in two resumed runs."""
    from specot_lab.distill.eagle import EagleTrainConfig, train_eagle

    target = _target()
    seqs = []
    for i in range(8):
        r = autoregressive_generate(target, [i, (3 * i) % 16], GenerationConfig(
            max_new_tokens=48, sampling=SamplingConfig(1.0), seed=i, stop_at_eos=False))
        seqs.append([i, (3 * i) % 16] + r.tokens)
    out = tmp_path_factory.mktemp("eagle_run")
    cfg = EagleTrainConfig(draft_vocab_size=12, ttt_steps=2, steps=120, lr=3e-3, warmup=10, save_every=40, max_len=64)
    train_eagle(target, seqs, out, cfg, progress=False, max_steps=60)
    first = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    train_eagle(target, seqs, out, cfg, progress=False)  # resumes at step 60
    logs = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return target, out, first, logs


def test_training_smoke_resumes_and_learns(trained):
    target, out, first, logs = trained
    assert len(first) == 60 and [r["step"] for r in logs] == list(range(1, 121))
    early = sum(r["loss"] for r in logs[:10]) / 10
    late = sum(r["loss"] for r in logs[-10:]) / 10
    assert late < 0.5 * early
    assert {"kl0", "kl1", "acc0", "acc1"} <= set(logs[-1])
    state = torch.load(out / "ckpt.pt", weights_only=False)
    assert state["step"] == 120 and len(state["draft_vocab"]) == 12
    from safetensors.torch import load_file

    assert set(load_file(str(out / "head" / "model.safetensors"))) == set(EAGLE3_KEYS)


def test_training_under_bf16_autocast_learns_and_keeps_float32_weights(tmp_path):
    """``autocast=True`` (the fast CPU training path) runs the head's matmuls in bf16 but keeps the
    weights and optimizer in float32; the loss still falls, and the exported head loads."""
    from specot_lab.distill.eagle import EagleTrainConfig, train_eagle

    target = _target()
    seqs = [[i, (3 * i) % 16] + [(5 * i + 7 * j) % 16 for j in range(40)] for i in range(6)]
    cfg = EagleTrainConfig(draft_vocab_size=12, ttt_steps=2, steps=80, lr=3e-3, warmup=10, save_every=40,
                           max_len=64, autocast=True)
    drafter = train_eagle(target, seqs, tmp_path, cfg, progress=False)
    logs = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert sum(r["loss"] for r in logs[-10:]) < 0.5 * sum(r["loss"] for r in logs[:10])
    state = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert all(v.dtype == torch.float32 for v in state["head"].values() if v.is_floating_point())
    loaded = EagleDrafter.from_pretrained(tmp_path / "head", target)
    assert torch.equal(loaded.head.lm_head.weight, drafter.head.lm_head.weight)


@pytest.mark.parametrize("kind", ["chain", "dynamic", "static"])
def test_trained_head_is_accepted_and_greedy_exact(trained, kind):
    """With a head that predicts the target, drafts are accepted (deep accepted paths exercise the
    caches) and greedy output still equals autoregressive decoding."""
    target, out, _, _ = trained
    dr = EagleDrafter.from_pretrained(out / "head", target, dynamic=kind != "static")
    cfg = GenerationConfig(max_new_tokens=40, gamma=4, sampling=GREEDY, stop_at_eos=False)
    prompt = [2, 6]
    ar = autoregressive_generate(target, prompt, cfg)
    if kind == "chain":
        res = speculative_generate(target, dr, prompt, cfg)
    else:
        res = tree_generate(target, dr, prompt, TreeSpec.topology(EAGLE_DEFAULT_TREE, "greedy"), cfg, verifier="greedy")
    assert res.tokens == ar.tokens
    assert res.stats.accepted >= 0.4 * res.stats.new_tokens
    rnd = speculative_generate(target, _eagle(target), prompt, cfg)
    assert res.stats.accepted > rnd.stats.accepted


@pytest.mark.slow
def test_trained_head_tree_is_lossless_chi_square(trained):
    target, out, _, _ = trained
    dr = EagleDrafter.from_pretrained(out / "head", target)
    prompt = [2, 6]
    exact = exact_joint(target.model, prompt, 3, SamplingConfig(1.0))
    gen = make_generator(77)
    cfg = GenerationConfig(max_new_tokens=3, sampling=SamplingConfig(1.0), stop_at_eos=False)
    spec = TreeSpec.prefix([2, 2], "greedy")
    samples = [tuple(tree_generate(target, dr, prompt, spec, cfg, verifier="greedy", generator=gen).tokens)
               for _ in range(1500)]
    assert chi_square_pvalue(samples, exact) > ALPHA


def test_cli_distill_eagle_and_api(tiny_model_dir, tmp_path):
    """``specot distill eagle`` (a few steps, ``--token-loss tvd``) writes a head that
    ``specot.generate(draft="eagle:PATH")`` uses, chain and tree; greedy output equals the
    autoregressive baseline."""
    import specot
    from specot.cli.main import main

    text = tmp_path / "train.txt"
    text.write_text("the cat sat on the mat and the dog ran to the park . " * 8)
    out = tmp_path / "run"
    rc = main(["distill", "eagle", "--out", str(out), "--target", str(tiny_model_dir), "--text", str(text),
               "--steps", "4", "--max-len", "32", "--draft-vocab", "12", "--lr", "1e-3", "--token-loss", "tvd"])
    assert rc == 0 and (out / "head" / "config.json").is_file()
    assert "tv0" in json.loads((out / "log.jsonl").read_text().splitlines()[-1])  # the TV token loss ran
    for tree_kw in ({}, {"n": 3, "gamma": 3, "verifier": "greedy"}):
        rep = specot.generate("the cat", target=str(tiny_model_dir), draft=f"eagle:{out / 'head'}", chat=False,
                              temperature=0.0, max_new_tokens=12, dtype="float32", baseline=True, **tree_kw)
        assert rep.result.tokens == rep.baseline.tokens
    with pytest.raises(FileNotFoundError):
        specot.generate("the cat", target=str(tiny_model_dir), draft=f"eagle:{tmp_path / 'nowhere'}", chat=False)


def test_cli_distill_data_then_eagle_trains_on_the_targets_own_answers(tiny_model_dir, tmp_path, capsys):
    """The shipped head's recipe through the CLI, for any target: ``specot distill data --target T
    --prompts FILE --top-k 0`` samples the target's answers (token ids only), and ``specot distill
    eagle --data DIR`` trains on exactly those sequences (and on ``--text`` too when given), in
    batches; a folder without shards, or ``--prompts`` with ``--split text``, is one line of error."""
    import specot
    from specot.cli.main import main
    from specot_lab.distill.data import iter_shards

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["the cat", "a dog ran", "the red mat"]))
    data = tmp_path / "answers"
    assert main(["distill", "data", "--target", str(tiny_model_dir), "--prompts", str(prompts), "--top-k", "0",
                 "--max-new-tokens", "6", "--batch-size", "2", "--out", str(data)]) == 0
    seqs = list(iter_shards(data))
    assert len(seqs) == 3 and all("topk_ids" not in s for s in seqs)  # one answer per prompt, ids only
    capsys.readouterr()
    out = tmp_path / "run"
    assert main(["distill", "eagle", "--target", str(tiny_model_dir), "--data", str(data), "--out", str(out),
                 "--steps", "3", "--batch-size", "2", "--max-len", "32", "--draft-vocab", "12"]) == 0
    n_tokens = sum(len(s["ids"]) for s in seqs)
    assert f"3 training sequences, {n_tokens} tokens" in capsys.readouterr().err  # the answers, no default text
    assert len((out / "log.jsonl").read_text().splitlines()) == 3
    rep = specot.generate("the cat", target=str(tiny_model_dir), draft=f"eagle:{out / 'head'}", chat=False,
                          temperature=0.0, max_new_tokens=8, dtype="float32", baseline=True)
    assert rep.result.tokens == rep.baseline.tokens
    text = tmp_path / "train.txt"
    text.write_text("the cat sat on the mat . " * 4)
    assert main(["distill", "eagle", "--target", str(tiny_model_dir), "--data", str(data), "--text", str(text),
                 "--out", str(tmp_path / "run2"), "--steps", "1", "--max-len", "32", "--draft-vocab", "12"]) == 0
    assert "4 training sequences" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["distill", "eagle", "--target", str(tiny_model_dir), "--data", str(empty), "--out",
                 str(tmp_path / "run3")]) == 1
    assert "no shard_*.pt files" in capsys.readouterr().err
    assert main(["distill", "data", "--target", str(tiny_model_dir), "--prompts", str(prompts), "--split", "text",
                 "--out", str(tmp_path / "x")]) == 1
    assert "pass one of them" in capsys.readouterr().err



@pytest.mark.parametrize("step,extra,match", [
    ("eagle", ["--steps", "0"], "steps (--steps) must be an integer >= 1"),
    ("eagle", ["--ttt-steps", "0"], "ttt_steps (--ttt-steps) must be an integer >= 1"),
    ("eagle", ["--max-len", "0"], "max_len (--max-len) must be an integer >= 3"),
    ("eagle", ["--draft-vocab", "0"], "draft_vocab_size (--draft-vocab) must be an integer >= 1"),
    ("eagle", ["--batch-size", "0"], "batch_size (--batch-size) must be an integer >= 1"),
    ("eagle", ["--lr", "-1"], "lr (--lr) must be a finite number > 0"),
    ("eagle", ["--time-budget-min", "-3"], "time_budget_min (--time-budget-min) must be a finite number > 0"),
    ("eagle", ["--time-budget-min", "0"], "time_budget_min (--time-budget-min) must be a finite number > 0"),
    ("eagle", ["--layers", "1,x"], "--layers takes comma-separated target layer indices"),
    ("eagle", ["--layers", "1,-2"], "each of layers (--layers) must be an integer >= 0"),
    ("eagle", ["--threads", "-1"], "threads (--threads) must be an integer >= 0"),
    ("data", ["--batch-size", "0"], "batch_size (--batch-size) must be an integer >= 1"),
    ("data", ["--max-new-tokens", "0"], "max_new_tokens (--max-new-tokens) must be an integer >= 1"),
    ("data", ["--temperature", "-1"], "temperature (--temperature) must be a finite number >= 0"),
    ("data", ["--n-prompts", "0"], "n_prompts (--n-prompts) must be an integer >= 1"),
    ("data", ["--top-k", "-1"], "top_k (--top-k) must be an integer >= 0"),
])
def test_distill_bad_counts_one_line_before_loading(tmp_path, monkeypatch, capsys, step, extra, match):
    """Counts that once crashed mid-run (``--ttt-steps 0``: a RuntimeError; ``--max-len 0``,
    ``--batch-size 0``: "range() arg 3 must not be zero") or ran silently (``--steps 0``, a negative
    ``--time-budget-min``, ``--temperature -1``, ``--max-new-tokens 0``, ``--n-prompts 0`` = all
    prompts) are one line of error, before the target is loaded."""
    import specot_lab.cli_distill as cd
    from specot.cli.main import main

    def boom(*a, **k):
        raise AssertionError("the target was loaded before the bad option was reported")
    monkeypatch.setattr(cd, "load_target", boom)
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat")
    base = {"eagle": ["distill", "eagle", "--text", str(text)], "data": ["distill", "data", "--split", "train"]}[step]
    try:
        rc = main(base + ["--out", str(tmp_path / "out"), *extra])
    except SystemExit as exc:  # refused by the parser: a usage error
        rc = exc.code
    assert rc in (1, 2)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("specot") and "error: " in err[0], err
    # the parser's bound names the flag alone; a check after it, the option too
    assert extra[0] in err[0] and (match in err[0] or "must be" in err[0]), err
    assert not (tmp_path / "out").exists()


def test_feature_layers_outside_the_target_are_refused(tiny_model_dir):
    from specot.drafting.eagle import eagle3_config
    from transformers import AutoConfig

    tc = AutoConfig.from_pretrained(tiny_model_dir)
    L = tc.num_hidden_layers
    assert eagle3_config(tc, layers=(0, L)).eagle_config["eagle_aux_hidden_state_layer_ids"] == [0, L]
    for bad in ((0, L + 1), (-1, 1), ()):
        with pytest.raises(ValueError, match=f"must lie in 0..{L}"):
            eagle3_config(tc, layers=bad)

def test_training_continues_from_a_trained_head(trained, tmp_path):
    """``init_head``: a new run starts from a trained head's weights, draft vocabulary
    and layers, so its first losses are those the head ended with, not a random head's."""
    from specot_lab.distill.eagle import EagleTrainConfig, train_eagle

    target, out, _, logs = trained
    seqs = [[i, (3 * i) % 16] + [(5 * i + 7 * j) % 16 for j in range(40)] for i in range(6)]
    init_dir = tmp_path / "init"  # the head, asking for int8 weights on a CPU as the shipped one does
    init_dir.mkdir()
    for f in (out / "head").iterdir():
        (init_dir / f.name).write_bytes(f.read_bytes())
    cfg_json = json.loads((init_dir / "config.json").read_text())
    (init_dir / "config.json").write_text(json.dumps({**cfg_json, "specot_int8_weights": True}))
    cfg = EagleTrainConfig(draft_vocab_size=None, ttt_steps=2, steps=5, lr=1e-6, warmup=1, max_len=64,
                           init_head=str(init_dir))
    drafter = train_eagle(target, seqs, tmp_path / "run", cfg, progress=False)
    cont = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    fresh_dir = tmp_path / "fresh"
    train_eagle(target, seqs, fresh_dir, EagleTrainConfig(draft_vocab_size=12, ttt_steps=2, steps=5, lr=1e-6,
                                                          warmup=1, max_len=64), progress=False)
    fresh = [json.loads(line) for line in (fresh_dir / "log.jsonl").read_text().splitlines()]
    assert cont[0]["loss"] < 0.5 * fresh[0]["loss"]
    src = EagleDrafter.from_pretrained(out / "head", target)
    assert torch.equal(drafter.head.target_ids(), src.head.target_ids())
    assert drafter.hidden_layers == src.hidden_layers


def test_frequent_vocab_keeps_a_trained_vocabulary_first():
    """``keep`` (a grown draft vocabulary): the trained vocabulary stays first, in its order; the rest are the most
    frequent other tokens (ties: lower id), then the lowest unseen ids."""
    from specot_lab.distill.eagle import frequent_vocab

    seqs = [[5, 5, 5, 3, 3, 9, 1], [9, 9, 9, 9, 7]]
    assert frequent_vocab(seqs, 3, 16) == [3, 5, 9]  # without keep: sorted by id
    assert frequent_vocab(seqs, 4, 16, keep=[7, 1]) == [7, 1, 9, 5]
    assert frequent_vocab(seqs, 7, 16, keep=[7, 1]) == [7, 1, 9, 5, 3, 0, 2]
    for size in (1, 17):
        with pytest.raises(ValueError, match="must lie in"):
            frequent_vocab(seqs, size, 16, keep=[7, 1])


def test_grow_draft_vocab_keeps_rows_and_extends_an_exact_linear_map():
    """Trained rows are kept; when they are exactly a linear image of the target's output
    embedding, every added row is that image too (the least-squares map is recovered)."""
    from specot_lab.distill.eagle import grow_draft_vocab

    g = torch.Generator().manual_seed(0)
    E = torch.randn(40, 6, generator=g)  # [V, H_t]
    A = torch.randn(6, 4, generator=g)  # [H_t, H]
    old = [3, 17, 0, 25, 8, 11, 30, 2, 19, 5]
    new = old + [39, 1, 14]
    W = E[old] @ A
    out = grow_draft_vocab(W, old, new, E)
    assert out.shape == (13, 4) and torch.equal(out[:10], W)
    torch.testing.assert_close(out[10:], E[[39, 1, 14]] @ A, rtol=1e-4, atol=1e-4)
    for bad in ([17, 3] + new[2:], new + [39]):
        with pytest.raises(ValueError, match="must start with the old one"):
            grow_draft_vocab(W, old, bad, E)


def test_training_grows_the_draft_vocabulary_of_a_trained_head(trained, tmp_path):
    """A ``draft_vocab_size`` above ``init_head``'s grows the vocabulary: the trained ids and rows
    come first and unchanged (lr ≈ 0), the added tokens are the data's most frequent others, and
    greedy decoding with the grown head still equals autoregressive decoding."""
    from specot_lab.distill.eagle import EagleTrainConfig, train_eagle

    target, out, _, _ = trained
    src = EagleDrafter.from_pretrained(out / "head", target)
    seqs = [[i, (3 * i) % 16] + [(5 * i + 7 * j) % 16 for j in range(40)] for i in range(6)]
    cfg = EagleTrainConfig(draft_vocab_size=15, ttt_steps=2, steps=2, lr=1e-9, warmup=1, max_len=64,
                           init_head=str(out / "head"))
    grown = train_eagle(target, seqs, tmp_path, cfg, progress=False)
    assert grown.head.draft_vocab_size == 15
    assert torch.equal(grown.head.target_ids()[:12], src.head.target_ids())
    added = set(grown.head.target_ids()[12:].tolist())
    assert not added & set(src.head.target_ids().tolist())
    torch.testing.assert_close(grown.head.lm_head.weight[:12].float(), src.head.lm_head.weight.float(),
                               rtol=1e-4, atol=1e-4)
    prompt = [2, 6]
    cfg = GenerationConfig(max_new_tokens=16, sampling=SamplingConfig(0.0), stop_at_eos=False)
    ar = autoregressive_generate(target, prompt, cfg)
    assert speculative_generate(target, grown, prompt, cfg).tokens == ar.tokens


def test_ttt_loss_of_a_chunk_shorter_than_the_unroll_is_finite(trained):
    """A 3-token chunk has two entries, so unroll step 2 has none to score: the loss covers steps 0
    and 1 and stays finite (a NaN loss for such chunks was once logged in training)."""
    from specot_lab.distill.eagle import EagleTrainConfig, target_features, ttt_loss

    target, out, _, _ = trained
    dr = EagleDrafter.from_pretrained(out / "head", target)
    head = dr.head.float()
    ids = [2, 6, 9]
    data = target_features(target.model, ids, dr.hidden_layers)
    loss, stats = ttt_loss(head, torch.tensor(ids), data, EagleTrainConfig(ttt_steps=3))
    assert math.isfinite(float(loss)) and set(stats) == {"kl0", "acc0", "kl1", "acc1"}
    full, _ = ttt_loss(head, torch.tensor(ids + [4, 1]), target_features(target.model, ids + [4, 1], dr.hidden_layers),
                       EagleTrainConfig(ttt_steps=3))
    assert math.isfinite(float(full))


def test_ttt_loss_of_a_deeper_head(trained):
    """The training unroll of a two-layer head: with layer 1's output projections at zero (how
    ``num_layers`` adds a layer to a trained head) every step's loss equals the one-layer head's, and with
    a random layer 1 the step-0 KL is the one computed from the inference pass
    (``forward_sequence``), so training and drafting run the same network."""
    from specot_lab.distill.eagle import EagleTrainConfig, target_features, ttt_loss

    target, out, _, _ = trained
    one = EagleDrafter.from_pretrained(out / "head", target).head.float()
    cfg = json.loads((out / "head" / "config.json").read_text())
    cfg = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    deep = Eagle3Head(type(one.config)(**{**cfg, "num_hidden_layers": 2}), num_features=3)
    deep.load_state_dict(one.checkpoint_state(), strict=False)
    deep.attach_embedding(target.model.get_input_embeddings())
    with torch.no_grad():
        deep.layers["1"].self_attn.o_proj.weight.zero_()
        deep.layers["1"].mlp.down_proj.weight.zero_()
    ids = [2, 6, 9, 4, 1, 7, 3, 5, 11, 0]
    data = target_features(target.model, ids, (1, 2, 2))
    tc = EagleTrainConfig(ttt_steps=3)
    l1, s1 = ttt_loss(one, torch.tensor(ids), data, tc)
    l2, s2 = ttt_loss(deep, torch.tensor(ids), data, tc)
    torch.testing.assert_close(l2, l1)
    assert s1 == pytest.approx(s2, rel=1e-5)
    with torch.no_grad():
        for w in (deep.layers["1"].self_attn.o_proj.weight, deep.layers["1"].mlp.down_proj.weight):
            w.normal_(0, 0.3)
    l3, s3 = ttt_loss(deep, torch.tensor(ids), data, tc)
    assert abs(s3["kl0"] - s1["kl0"]) > 1e-3
    logits, _ = deep.forward_sequence(torch.tensor(ids[1:]), data["feats"][:-1])
    p = data["probs"][1:].index_select(1, deep.target_ids())
    p = p / p.sum(-1, keepdim=True)
    kl0 = (p * (p.clamp_min(1e-12).log() - torch.log_softmax(logits, -1))).sum(-1).mean()
    assert s3["kl0"] == pytest.approx(float(kl0.detach()), rel=1e-4)


def test_batched_ttt_loss_equals_the_single_sequence_losses(trained):
    """A right-padded batch of two sequences of different lengths (GPU training): the
    batched features equal the single pass's (the law on the draft vocabulary renormalized), and
    every step's KL is the entry-weighted mean of the two single-sequence KLs, so padding leaks
    into neither the attention nor the loss."""
    from specot_lab.distill.eagle import (EagleTrainConfig, epoch_batches, target_features, target_features_batch,
                                          ttt_loss, ttt_loss_batch)

    target, out, _, _ = trained
    dr = EagleDrafter.from_pretrained(out / "head", target)
    head = dr.head.float()
    a, b = [2, 6, 9, 4, 1, 7, 3], [5, 11, 0, 2, 6, 9, 4, 8, 1, 3, 7]
    tc = EagleTrainConfig(ttt_steps=3, feat_weight=0.0)
    batch = target_features_batch(target.model, [a, b], dr.hidden_layers, head.target_ids())
    single = target_features(target.model, a, dr.hidden_layers)
    torch.testing.assert_close(batch["feats"][0, :len(a) - 1], single["feats"][:-1], rtol=1e-5, atol=1e-5)
    p = single["probs"][1:].index_select(1, head.target_ids())
    torch.testing.assert_close(batch["p"][0, :len(a) - 1], p / p.sum(-1, keepdim=True), rtol=1e-5, atol=1e-6)
    assert batch["lengths"].tolist() == [len(a) - 1, len(b) - 1]
    _, sb = ttt_loss_batch(head, batch["tokens"], batch["feats"], batch["p"], batch["last"], batch["lengths"], tc)
    _, sa1 = ttt_loss(head, torch.tensor(a), single, tc)
    _, sb1 = ttt_loss(head, torch.tensor(b), target_features(target.model, b, dr.hidden_layers), tc)
    for s in range(3):
        na, nb = len(a) - 1 - s, len(b) - 1 - s
        assert sb[f"kl{s}"] == pytest.approx((na * sa1[f"kl{s}"] + nb * sb1[f"kl{s}"]) / (na + nb), rel=1e-4)
    # batches: every chunk once an epoch, similar lengths together, the same batches on a resume
    lengths = [3, 50, 4, 49, 5, 48, 6, 47]
    ep = epoch_batches(lengths, 2, seed=0, epoch=0, window=4)
    assert sorted(i for bt in ep for i in bt) == list(range(8))
    assert ep == epoch_batches(lengths, 2, seed=0, epoch=0, window=4) != epoch_batches(lengths, 2, seed=0, epoch=1, window=4)
    assert epoch_batches(lengths, 1, seed=0, epoch=0) == [[i] for bt in epoch_batches(lengths, 1, 0, 0) for i in bt]


def test_time_budget_fits_the_remaining_slot_and_padding_is_right_aligned():
    """``--time-budget-min``: the steps that fit what is left of the slot at the measured rate, none
    once it is spent; ``right_padded`` puts every sequence at the left with its mask."""
    from specot_lab.distill.data import right_padded
    from specot_lab.distill.eagle import _budget_total, _steps_within

    assert _steps_within(300.0, 0.25) == 1200
    assert _steps_within(-4.0, 0.25) == 0 and _steps_within(10.0, 0.0) == 0
    # re-estimated: a faster rate later lengthens the schedule, never past the configured steps
    assert _budget_total(40, 100_000, 300.0, 0.5) == 640 and _budget_total(640, 100_000, 240.0, 0.25) == 1600
    assert _budget_total(40, 500, 300.0, 0.25) == 500 and _budget_total(90, 500, -1.0, 0.25) == 90
    ids, mask = right_padded([[4, 5, 6], [7]], pad=9)
    assert ids.tolist() == [[4, 5, 6], [7, 9, 9]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_training_adds_a_layer_that_starts_as_the_identity(trained, tmp_path):
    """``num_layers`` above ``init_head``'s: the run's first loss is the trained head's (the added
    layer is the identity at step 0), the exported head has ``layers.1.*`` and greedy decoding with
    it equals autoregressive decoding; fewer layers than the head's is refused."""
    from specot_lab.distill.eagle import EagleTrainConfig, train_eagle

    target, out, _, _ = trained
    seqs = [[i, (3 * i) % 16] + [(5 * i + 7 * j) % 16 for j in range(40)] for i in range(6)]
    kw = dict(draft_vocab_size=None, ttt_steps=2, steps=3, lr=1e-3, warmup=1, max_len=64, init_head=str(out / "head"))
    train_eagle(target, seqs, tmp_path / "one", EagleTrainConfig(**kw), progress=False)
    deep = train_eagle(target, seqs, tmp_path / "two", EagleTrainConfig(**kw, num_layers=2), progress=False)
    log1, log2 = ([json.loads(line) for line in (tmp_path / d / "log.jsonl").read_text().splitlines()] for d in ("one", "two"))
    assert log2[0]["loss"] == pytest.approx(log1[0]["loss"], rel=1e-5)
    assert deep.head.num_layers == 2
    from safetensors.torch import load_file

    assert _deep_keys() <= set(load_file(str(tmp_path / "two" / "head" / "model.safetensors")))
    assert float(deep.head.layers["1"].self_attn.o_proj.weight.abs().max()) > 0  # it trained
    prompt = [2, 6]
    cfg = GenerationConfig(max_new_tokens=16, sampling=SamplingConfig(0.0), stop_at_eos=False)
    assert speculative_generate(target, deep, prompt, cfg).tokens == autoregressive_generate(target, prompt, cfg).tokens
    with pytest.raises(ValueError, match="num_layers"):
        train_eagle(target, seqs, tmp_path / "bad", EagleTrainConfig(**kw, num_layers=0), progress=False)
    with pytest.raises(ValueError, match="fewer than"):
        train_eagle(target, seqs, tmp_path / "bad2", EagleTrainConfig(**{**kw, "init_head": str(tmp_path / "two" / "head")},
                                                                       num_layers=1), progress=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("T,P", [(1, 0), (1, 37), (3, 20)])
def test_grouped_attention_equals_repeated_heads_in_float64(dtype, T, P):
    """The head's attention (float32 on a CPU, grouped-query) equals attention over repeated
    key/value heads computed in float64, under a causal mask over the new entries."""
    g = torch.Generator().manual_seed(T * 100 + P)
    h, kv, d = 6, 2, 8
    q = torch.randn(h, T, d, generator=g).to(dtype)
    keys = torch.randn(kv, P + T, d, generator=g).to(dtype)
    vals = torch.randn(kv, P + T, d, generator=g).to(dtype)
    mask = torch.ones(T, P + T, dtype=torch.bool)
    mask[:, P:] = torch.ones(T, T, dtype=torch.bool).tril()
    mask[0, 0] = P == 0  # one masked committed entry when there is one
    K = keys.double().repeat_interleave(h // kv, 0)
    V = vals.double().repeat_interleave(h // kv, 0)
    s = (q.double() @ K.transpose(1, 2)) / math.sqrt(d)
    ref = torch.softmax(s.masked_fill(~mask, -math.inf), -1) @ V
    out = _attend(q, keys, vals, mask)
    assert out.dtype == dtype and out.shape == (h, T, d)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


def test_answer_positions_are_the_first_draft_position_of_each_answer_token():
    """``answer_positions`` (the lab scripts' teacher-forced pass): row j of p is the target's law of
    answer token j, and row j of z the head's logits after the context ``full[: prompt_len + j]``
    alone (a head pass cut there), so no row sees its own token."""
    from specot_lab.distill.eagle import answer_positions, target_features

    target = _target()
    dr = _eagle(target)
    full, n = PROMPT + [2, 9, 4], len(PROMPT)
    z, p = answer_positions(target, dr, n, full)
    assert z.shape == (len(full) - n + 1, dr.head.draft_vocab_size) and p.shape == (len(full) - n + 1, target.vocab_size)
    for j in range(len(full) - n + 1):
        ctx = full[: n + j]
        with torch.no_grad():
            want_p = torch.softmax(target.model(input_ids=torch.tensor([ctx])).logits[0, -1].float(), -1)
            feats = target_features(target.model, ctx, dr.hidden_layers)["feats"]
            want_z, _ = dr.head.forward_sequence(torch.tensor(ctx[1:]), feats[:-1])
        torch.testing.assert_close(p[j], want_p, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(z[j], want_z[-1].float(), atol=1e-4, rtol=1e-4)


def test_last_logits_are_the_last_row_of_the_full_pass():
    target = _target()
    head = _eagle(target).head
    T = 5
    ids = torch.tensor([1, 5, 3, 7, 2])
    feats = torch.randn(T, head.fc.in_features, generator=torch.Generator().manual_seed(0))
    pk, pv = head.empty_kv()
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    full = head.step(ids, feats, torch.arange(T), pk, pv, mask, fused=True)
    last = head.step(ids, feats, torch.arange(T), pk, pv, mask, fused=True, last_logits=True)
    assert last[0].shape == (1, head.draft_vocab_size)
    torch.testing.assert_close(last[0], full[0][-1:])
    for a, b in zip(full[1:], last[1:]):
        torch.testing.assert_close(a, b)


def test_tvd_token_loss_is_one_minus_the_acceptance_rate(trained, tmp_path):
    """``token_loss="tvd"``: the step-0 token loss is the total variation between the
    target's law on the draft vocabulary (renormalized) and the head's q of the inference pass,
    i.e. one minus the acceptance rate Σ min(p, q) of speculative sampling at T = 1 (Leviathan et
    al. 2023, Sec. 3); it has gradients; an unknown loss name is refused."""
    from specot_lab.distill.eagle import EagleTrainConfig, target_features, train_eagle, ttt_loss

    target, out, _, _ = trained
    head = EagleDrafter.from_pretrained(out / "head", target).head.float().requires_grad_(True)
    ids = [2, 6, 9, 4, 1, 7, 3, 5, 11, 0]
    data = target_features(target.model, ids, (1, 2, 2))
    loss, stats = ttt_loss(head, torch.tensor(ids), data, EagleTrainConfig(ttt_steps=1, feat_weight=0.0,
                                                                           token_loss="tvd"))
    logits, _ = head.forward_sequence(torch.tensor(ids[1:]), data["feats"][:-1])
    p = data["probs"][1:].index_select(1, head.target_ids())
    p = p / p.sum(-1, keepdim=True)
    alpha = torch.minimum(p, torch.softmax(logits.float(), -1)).sum(-1)  # [T] acceptance at each entry
    assert set(stats) == {"tv0", "acc0"}
    assert stats["tv0"] == pytest.approx(float(1 - alpha.mean().detach()), rel=1e-4)
    torch.testing.assert_close(loss.detach(), 1 - alpha.mean().detach(), rtol=1e-4, atol=1e-6)
    loss.backward()
    grads = [w.grad for w in head.parameters() if w.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)
    with pytest.raises(ValueError, match=r"token_loss \(--token-loss\) must be 'fkl' or 'tvd'"):
        train_eagle(target, [ids], tmp_path / "run", EagleTrainConfig(draft_vocab_size=12, steps=1, token_loss="kl"))
    assert not (tmp_path / "run").exists()  # refused before anything was written (by the config itself)
