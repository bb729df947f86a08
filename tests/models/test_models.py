"""Model wrapper (cache rollback / compaction), loading from a local directory, drafters, CLI."""

from __future__ import annotations

import json

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from specot.cli.main import main as cli_main
from specot.drafting import ModelDrafter, NGramDrafter, NGramTable, check_vocab_compatible
from specot.geometry import token_tree
from specot.models import load_model, resolve_dtype
from specot.models.device import (GQA_SDPA, SmallBatchHead, gqa_sdpa_attention, install_gqa_sdpa,
                                  install_small_batch_head, small_batch_linear)
from specot.sampling import SamplingConfig

from model_helpers import tiny_lm


def test_logits_after_matches_full_forward_and_rolls_back():
    lm = tiny_lm(0)
    seq = [1, 4, 2, 9, 9, 3, 7]
    with torch.no_grad():
        full = lm.model(input_ids=torch.tensor([seq])).logits[0].float()
    out = lm.logits_after(seq[:4], seq[4:])  # one pass over the rest
    torch.testing.assert_close(out, full[3:], atol=1e-10, rtol=0)
    # a diverging continuation: the cache is cropped back to the common prefix
    out2 = lm.logits_after(seq[:3] + [5], [6])
    with torch.no_grad():
        ref = lm.model(input_ids=torch.tensor([seq[:3] + [5, 6]])).logits[0, -2:].float()
    torch.testing.assert_close(out2, ref, atol=1e-10, rtol=0)
    assert lm.cached_ids == seq[:3] + [5, 6]


def test_keep_positions_compacts_cache():
    lm = tiny_lm(0)
    lm.forward([1, 2, 3, 8, 9])
    lm.keep_positions([0, 1, 2, 3])  # keep a prefix: same as a rollback
    assert lm.cached_ids == [1, 2, 3, 8]
    out = lm.forward([5])
    with torch.no_grad():
        ref = lm.model(input_ids=torch.tensor([[1, 2, 3, 8, 5]])).logits[0, -1].float()
    torch.testing.assert_close(out[0], ref, atol=1e-10, rtol=0)
    lm.keep_positions([0, 2])
    assert lm.cached_ids == [1, 3]


def test_context_limit_in_wrapper():
    lm = tiny_lm(0, max_pos=8)
    with pytest.raises(ValueError, match="exceed"):
        lm.logits_after(list(range(6)), [1, 2, 3])


def test_resolve_dtype():
    assert resolve_dtype("float32") == torch.float32
    assert resolve_dtype("auto", "cuda") == torch.bfloat16
    assert resolve_dtype("auto") in (torch.float32, torch.bfloat16)
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("float8")


def test_load_model_from_local_directory(tiny_model_dir):
    lm = load_model(tiny_model_dir, dtype="float32")
    assert lm.vocab_size == 16 and lm.tokenizer is not None
    assert lm.eos_token_ids == {0}
    ids = lm.encode_prompt("the cat sat on the mat", chat=False)
    assert ids == [1, 3, 5, 6, 1, 7]
    with pytest.raises(FileNotFoundError):
        load_model("./no/such/model/dir")


def test_vocab_mismatch_detected_at_load(tiny_model_dir):
    target = load_model(tiny_model_dir, dtype="float32")
    other = tiny_lm(1, vocab=12)
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        check_vocab_compatible(target, other)
    same = load_model(tiny_model_dir, dtype="float32")
    check_vocab_compatible(target, same)
    # same size, different token->id map
    same.tokenizer.add_tokens(["zebra"])
    with pytest.raises(ValueError, match="tokenizer mismatch"):
        check_vocab_compatible(target, same)


def test_ngram_table_and_prompt_lookup():
    table = NGramTable.from_token_sequences([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 5], [7, 3, 6]], n=2)
    assert table.lookup([1, 2, 3]) == 5  # most frequent after (2, 3)
    assert table.lookup([9, 3]) == 5  # back-off to (3,): 5 (x2) beats 4 and 6
    assert table.lookup([9]) is None
    d = NGramDrafter(n=3, table=table)
    # prompt lookup: the context's last 2 tokens (8, 9) occurred before, followed by 10, 11
    prop = d.propose([8, 9, 10, 11, 12, 8, 9], 3, SamplingConfig())
    assert prop.tokens == [9, 10, 11, 12] and prop.q is None and prop.is_chain()  # root, then the chain
    assert d.propose([2, 3], 3, SamplingConfig()).tokens[1:] == [5]  # table: (2,3)->5, then nothing follows 5
    assert NGramDrafter(n=2, table=None).propose([1, 2, 3], 4, SamplingConfig()).size == 0
    with pytest.raises(ValueError):
        NGramDrafter(n=0)


def test_model_drafter_returns_its_distributions():
    d = ModelDrafter(tiny_lm(1))
    prop = d.propose([1, 2, 3], 4, SamplingConfig(0.7), torch.Generator().manual_seed(0))
    assert prop.size == 4 and prop.q.shape == (4, 16) and prop.is_chain()
    assert all(prop.q[prop.q_row[prop.parents[i]], t] > 0 for i, t in enumerate(prop.tokens) if i > 0)
    torch.testing.assert_close(prop.q.sum(-1), torch.ones(4, dtype=prop.q.dtype))


def test_cli_generate_json(tiny_model_dir, capsys):
    rc = cli_main(["generate", "--prompt", "the cat sat", "--target", str(tiny_model_dir), "--draft", str(tiny_model_dir),
                   "--raw", "--max-new-tokens", "8", "--gamma", "3", "--temperature", "0", "--baseline", "--json",
                   "--dtype", "float32"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    spec, base = out["speculative"], out["baseline"]
    assert spec["tokens"] == base["tokens"]  # greedy: identical
    assert spec["stats"]["block_efficiency"] >= 1.0 and out["speedup"] > 0


def test_cli_generate_streams_text_and_stats(tiny_model_dir, capsys):
    rc = cli_main(["generate", "--prompt", "the dog ran", "--target", str(tiny_model_dir), "--draft", "ngram",
                   "--ngram-corpus", "none", "--raw", "--max-new-tokens", "6", "--dtype", "float32"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "block efficiency" in text and "tokens/s" in text


@pytest.mark.parametrize(
    "args,match",
    [
        (["--temperature", "-1"], "temperature"),
        (["--top-p", "0"], "top_p"),
        (["--gamma", "0"], "gamma"),
        (["--verifier", "nope"], "unknown verifier"),
        (["--max-new-tokens", "0"], "max_new_tokens"),
    ],
)
def test_cli_bad_arguments_give_clear_errors(tiny_model_dir, capsys, args, match):
    rc = cli_main(["generate", "--prompt", "the", "--target", str(tiny_model_dir), "--draft", "ngram",
                   "--ngram-corpus", "none", "--raw", "--dtype", "float32", *args])
    assert rc == 1
    assert match in capsys.readouterr().err


def test_small_batch_head_matches_f_linear_and_replaces_only_large_heads():
    lm = tiny_lm(0)
    assert not install_small_batch_head(lm.model)  # a tiny head keeps nn.Linear
    head = lm.model.get_output_embeddings()
    x = torch.randn(1, 40, head.in_features, dtype=head.weight.dtype)  # [B, M, d]
    ref = torch.nn.functional.linear(x, head.weight)
    assert install_small_batch_head(lm.model, min_size=1)
    new = lm.model.get_output_embeddings()
    assert isinstance(new, SmallBatchHead) and new.weight is head.weight  # swapped, weight shared
    assert type(head).forward is torch.nn.Linear.forward  # nothing patched on the old module
    for m in (1, 2, 5, 8, 9, 33):
        out = new(x[:, :m])
        torch.testing.assert_close(out, ref[:, :m])  # [1, m, V], any row count
        assert out.is_contiguous()  # a transposed view would make every reduction over V strided
    full = lm.model(input_ids=torch.tensor([[1, 2, 3]])).logits
    torch.testing.assert_close(full, torch.nn.functional.linear(lm.model.model(torch.tensor([[1, 2, 3]])).last_hidden_state, head.weight))


def test_small_batch_layout_is_float32_only(monkeypatch):
    """bf16 heads keep F.linear (faster there: docs/bench/head_speed.json); float32 takes W @ xᵀ."""
    calls = []
    real = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: calls.append(a[1].dtype) or real(*a))
    w, x = torch.randn(64, 8), torch.randn(5, 8)
    f32 = small_batch_linear(w, None, x)
    assert calls == [] and f32.is_contiguous()
    torch.testing.assert_close(f32, real(x, w))
    small_batch_linear(w.to(torch.bfloat16), None, x.to(torch.bfloat16))
    assert calls == [torch.bfloat16]


def test_prefill_computes_only_the_needed_logit_rows():
    lm = tiny_lm(0)
    seq = [1, 4, 2, 9, 9, 3, 7]
    with torch.no_grad():
        full = lm.model(input_ids=torch.tensor([seq])).logits[0].float()
    out = lm.forward(seq, last=2)
    assert out.shape == (2, lm.vocab_size)
    torch.testing.assert_close(out, full[-2:], atol=1e-10, rtol=0)


class _Groups(torch.nn.Module):
    """What transformers' attention functions read off an attention module."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups, self.is_causal, self.training = groups, True, False


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("T", [1, 2, 7])
def test_gqa_sdpa_attention_equals_transformers_sdpa(dtype, T):
    """The same attention as transformers' SDPA function, with or without a mask, for one query
    token (delegated) and several (the kernel's own GQA)."""
    g = torch.Generator().manual_seed(T)
    S, h, kv, d = 23, 6, 2, 8
    q = torch.randn(1, h, T, d, generator=g).to(dtype)  # [B, H, T, D]
    k, v = (torch.randn(1, kv, S, d, generator=g).to(dtype) for _ in range(2))  # [B, H_kv, S, D]
    visible = torch.ones(T, S, dtype=torch.bool)
    visible[:, S - T:] = torch.tril(torch.ones(T, T, dtype=torch.bool))
    visible[-1, 3] = False  # not a plain causal pattern: a tree mask
    mask = torch.zeros(T, S, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)[None, None]
    mod = _Groups(h // kv)
    for m in (mask, None):
        ref, _ = sdpa_attention_forward(mod, q, k, v, m, scaling=d ** -0.5)
        out, none = gqa_sdpa_attention(mod, q, k, v, m, scaling=d ** -0.5)
        assert none is None and out.shape == (1, T, h, d) and out.dtype == dtype
        torch.testing.assert_close(out, ref, atol=0, rtol=0)  # the same products in the same order


def test_install_gqa_sdpa_only_on_grouped_sdpa_models():
    from transformers import LlamaConfig, LlamaForCausalLM

    lm = tiny_lm(0, dtype=torch.float32)  # 4 query heads over 2 KV heads, SDPA: installed by CausalLM
    assert lm.model.config._attn_implementation == GQA_SDPA
    assert install_gqa_sdpa(lm.model)  # again: a no-op
    ctx, toks, parents = [1, 4, 2, 9, 9, 3], [5, 6, 7, 8, 2], [-1, -1, 0, 0, 2]
    tree = token_tree([ctx[-1]] + toks, [-1] + [p + 1 for p in parents])
    new = lm.tree_logits(ctx, tree)  # [1 + N, V], a tree mask: the new kernel path
    lm.reset()
    lm.model.set_attn_implementation("sdpa")
    torch.testing.assert_close(lm.tree_logits(ctx, tree), new, atol=0, rtol=0)
    base = dict(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)
    mha = LlamaForCausalLM(LlamaConfig(**base, num_key_value_heads=4))  # no head groups
    assert not install_gqa_sdpa(mha) and mha.config._attn_implementation == "sdpa"
    eager = LlamaForCausalLM(LlamaConfig(**base, num_key_value_heads=2, attn_implementation="eager"))
    assert not install_gqa_sdpa(eager) and eager.config._attn_implementation == "eager"
