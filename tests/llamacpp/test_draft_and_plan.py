"""The distilled draft as a GGUF (converted with the gguf package) and its drafter on llama.cpp; the
speedup model with a cost curve."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from llamacpp_helpers import check_greedy, greedy_reference
from specot.drafting import TreeSpec
from specot.engine import speculative_generate
from specot.engine.types import GenerationConfig
from specot.models.embedded import load_embedded_draft
from specot.sampling import SamplingConfig
from specot.calibration import PassCostCurve, break_even_alpha
from specot.plan.draft_verdict import predicted_speedup
from specot_lab.bench.llamacpp import best_chain, chain_speedup, tree_speedup
from specot_llamacpp.draft import LlamaCppDrafter, load_draft


@pytest.fixture(scope="module")
def drafter(target):
    d = load_draft(target, n_threads=1)
    yield d
    d.model.close()


@pytest.mark.real_model
def test_converted_draft_computes_what_the_transformers_draft_computes(drafter, prompt_ids):
    ids = prompt_ids[0]
    mine = drafter.model.logits_after(ids, [330, 253])  # [3, V]
    ref = load_embedded_draft(dtype="float32").logits_after(ids, [330, 253])
    assert float((mine - ref).abs().max()) < 0.05  # float32 weights on both sides
    assert mine.argmax(-1).tolist() == ref.argmax(-1).tolist()


@pytest.mark.real_model
def test_draft_model_greedy_equals_autoregressive_up_to_near_ties(target, drafter, prompt_ids):
    ids = prompt_ids[1]
    cfg = GenerationConfig(max_new_tokens=32, gamma=2, sampling=SamplingConfig(temperature=0.0), stop_at_eos=False)
    res = speculative_generate(target, drafter, ids, cfg)
    assert res.stats.accepted > 0
    check_greedy(target, ids, res.tokens, greedy_reference(target, ids, 32))


@pytest.mark.real_model
def test_draft_model_proposes_chains_with_their_q(drafter, prompt_ids):
    drafter.start(prompt_ids[0], TreeSpec.sequences(1, 3))
    tree = drafter.propose(prompt_ids[0], 3, SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    assert tree.size == 3 and tree.q.shape == (3, drafter.vocab_size)
    assert torch.allclose(tree.q.sum(-1), torch.ones(3, dtype=tree.q.dtype), atol=1e-4)
    with pytest.raises(TypeError):
        LlamaCppDrafter(object())


LINEAR = PassCostCurve((1, 2, 3, 5), (10.0, 20.0, 30.0, 50.0), repeats=1)
FLAT = PassCostCurve((1, 2, 3, 5), (10.0,) * 4, repeats=1)


def test_speedup_model_with_a_cost_curve():
    assert LINEAR.ratio(4) == pytest.approx(4.0) and LINEAR.ratios == (1.0, 2.0, 3.0, 5.0)
    # a flat curve is Leviathan's model: E(alpha, gamma)
    assert chain_speedup(0.5, 2, FLAT) == pytest.approx(1.75)
    # a pass that costs B one-token passes: no acceptance pays for any draft
    assert break_even_alpha(1, LINEAR) is None and best_chain(0.99, LINEAR).gamma == 0
    assert break_even_alpha(1, FLAT) == pytest.approx(0.0, abs=1e-6)
    assert tree_speedup([0.5, 0.5], 3, FLAT) == pytest.approx(1.75)
    assert predicted_speedup([2, 0], [3, 1], LINEAR.ratio) == pytest.approx(4 / 4)
    with pytest.raises(ValueError):
        LINEAR.ratio(0)


def test_the_backend_entry_imports_without_llama_cpp_and_says_how_to_install_it():
    code = ("import sys; sys.modules['llama_cpp'] = None\n"
            "from specot_llamacpp.backend import BACKEND\n"
            "assert BACKEND.name == 'llamacpp' and not BACKEND.hidden_states\n"
            "try:\n    BACKEND.load(None)\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "make setup-llamacpp" in out.stdout


def test_the_backend_refuses_a_dtype_or_a_device():
    from specot_llamacpp.backend import BACKEND

    with pytest.raises(ValueError, match="CPU"):
        BACKEND.load(None, device="cuda")
    with pytest.raises(ValueError, match="dtype"):
        BACKEND.load(None, dtype="bfloat16")


@pytest.mark.real_model
def test_the_auto_plan_drafts_where_the_answer_copies_and_stays_exact(target):
    from specot.drafting import SuffixDrafter
    from specot.engine import tree_generate
    from specot_lab.bench.llamacpp import auto_drafter
    from specot_llamacpp.auto import AUTO_TABLE

    drafter, spec = auto_drafter(target, 0.0)
    assert isinstance(drafter, SuffixDrafter) and spec.depth == AUTO_TABLE.greedy.gamma
    assert (drafter.kappa, drafter.min_n, drafter.cost_per_token) == (0.05, 4, 0.38)
    assert drafter.copy_model and drafter.anchor is not None  # the copy model and its anchor
    text = ("The Industrial Revolution began in Great Britain in the late eighteenth century. It moved production "
            "from homes and small workshops to large factories powered by water and steam.")
    ids = target.encode_prompt("Copy the following text exactly, word for word:\n\n" + text)
    cfg = GenerationConfig(max_new_tokens=32, sampling=SamplingConfig(temperature=0.0), stop_at_eos=False)
    res = tree_generate(target, drafter, ids, spec, cfg)
    assert res.stats.accepted >= 10  # the copied text is drafted and accepted
    check_greedy(target, ids, res.tokens, greedy_reference(target, ids, 32))


@pytest.mark.real_model
def test_suffix_with_a_cross_vocabulary_draft_is_a_hybrid_and_greedy_equals_autoregressive(target, prompt_ids):
    """``suffix+xvocab-slem:PATH``: suffix chains where the text repeats, the other-vocabulary draft
    model's SLEM chains elsewhere, one verifier for both."""
    from specot.drafting import HybridDrafter
    from specot.models.embedded import embedded_gguf
    from specot.plan import make_plan, run_plan

    folder, name = embedded_gguf()
    plan = make_plan(f"suffix+xvocab-slem:{folder / name}", target=target, temperature=0.0, gamma=4)
    drafter = plan.draft.load(target)
    assert isinstance(drafter, HybridDrafter) and drafter.model.mode == "slem"
    ids = prompt_ids[1]
    cfg = GenerationConfig(max_new_tokens=24, sampling=SamplingConfig(temperature=0.0), seed=0)
    res = run_plan(plan, target, drafter, ids, cfg, plan.verifier.build())
    check_greedy(target, ids, res.tokens, greedy_reference(target, ids, 24))
    assert res.stats.drafted > 0


def test_auto_on_llamacpp_keeps_its_table_options_over_the_front_doors_defaults():
    """``generate(draft="auto")`` passes every drafter option, defaults included; the backend table's
    choices (no n-gram corpus) hold unless the caller gave another value."""
    from specot.plan import make_plan

    def corpus(**kw):
        return dict(make_plan("auto", target=None, backend="llamacpp", temperature=0.0, **kw).draft.options)["ngram_corpus"]

    assert corpus() == "none"
    assert corpus(ngram_corpus="pydoc") == "none"  # the kind's default: what every front door passes
    assert corpus(ngram_corpus=__file__) == __file__  # the caller's own corpus
