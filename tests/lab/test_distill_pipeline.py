"""specot_lab.distill on tiny models: prompt sets, batched sampling with soft labels, resumable shards,
the distillation loss, training/resume/export and the held-out evaluation (seconds, no real model)."""

from __future__ import annotations

import json

import pytest
import torch

from specot_lab import corpus as C
from specot_lab.distill import data as D
from specot_lab.distill import train as T
from specot_lab.distill.evaluate import cost_coefficient, held_out_alpha
from specot.models import CausalLM, load_model

from model_helpers import tiny_llama


# ----------------------------------------------------------------------------- prompt sets
def test_prompt_sets_are_disjoint_and_deterministic():
    from pydoc_data.topics import topics

    train_keys, held = C.topic_split()
    assert held and train_keys and not set(held) & set(train_keys)
    tr = C.train_prompts(0)
    assert tr == C.train_prompts(0) and tr != C.train_prompts(1)
    assert len(tr) > 1000
    ho = C.heldout_prompts(12)
    assert len(ho) == 12 and ho == C.heldout_prompts(12)
    joined = "\n".join(tr)
    for key in held:  # no held-out topic text leaks into the training prompts
        words = " ".join(topics[key].split()).split(" ")
        probe = " ".join(words[20:32])
        assert probe not in joined, key


def test_write_jsonl_roundtrip(tmp_path):
    from specot_lab.corpus import load_prompts

    C.write_jsonl(["a b", "c\nd"], tmp_path / "p.jsonl")
    assert load_prompts(str(tmp_path / "p.jsonl"), 5) == ["a b", "c\nd"]


# ----------------------------------------------------------------------------- sampling
def _full_probs(model, ids):
    with torch.no_grad():
        return torch.softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)


@pytest.mark.parametrize("rows", [D.PREFILL_TOPK_ROWS, 1, 2])
def test_sample_batch_left_padding_matches_unpadded_model(rows, monkeypatch):
    """Every soft label equals the unpadded model's law, also when the prefill's top-k runs a
    few prompts at a time (``PREFILL_TOPK_ROWS`` below the batch)."""
    monkeypatch.setattr(D, "PREFILL_TOPK_ROWS", rows)
    model = tiny_llama(0, vocab=16, dtype=torch.float32, eos=0)
    lm = CausalLM(model, name="tiny")
    prompts = [[3, 4, 5], [7, 8, 9, 10, 11, 12, 13], [2]]
    cfg = D.SampleConfig(batch_size=3, max_new_tokens=6, top_k=16)
    seqs = D.sample_batch(lm, prompts, cfg, eos_ids={0}, generator=torch.Generator().manual_seed(0))
    for s, p in zip(seqs, prompts):
        ids = s["ids"].tolist()
        assert ids[: len(p)] == p and s["n_prompt"] == len(p)
        assert 1 <= len(ids) - len(p) <= 6
        assert s["topk_p"].shape == (len(ids) - 1, 16) and s["topk_ids"].shape == (len(ids) - 1, 16)
        ref = _full_probs(model, ids[:-1])  # [L-1, V]
        got = torch.zeros_like(ref).scatter_(-1, s["topk_ids"].long(), s["topk_p"].double())
        assert torch.allclose(got, ref, atol=2e-3), (got - ref).abs().max()
        if 0 in ids[len(p):]:
            assert ids[-1] == 0 and ids[len(p):].count(0) == 1


def test_sample_batch_greedy_equals_autoregressive():
    from specot.engine import GenerationConfig, autoregressive_generate
    from specot.sampling import SamplingConfig

    model = tiny_llama(1, vocab=16, dtype=torch.float32, eos=0)
    lm = CausalLM(model, name="tiny")
    prompts = [[3, 4, 5, 6], [9], [1, 2]]
    seqs = D.sample_batch(lm, prompts, D.SampleConfig(max_new_tokens=8, temperature=0.0, top_k=4), eos_ids={0})
    for s, p in zip(seqs, prompts):
        ar = autoregressive_generate(lm, p, GenerationConfig(max_new_tokens=8, sampling=SamplingConfig(0.0)))
        assert s["ids"].tolist()[len(p):] == ar.tokens


def test_sample_batch_draws_from_the_tempered_target_law_chi_square():
    """4 000 copies of one prompt in one batch: the first sampled tokens against softmax(logits / T),
    Pearson chi-square, failing below p = 1e-4 (a correct sampler fails 1 seed in 10 000; the
    seed is fixed, so the test is deterministic)."""
    from scipy.stats import chisquare

    model = tiny_llama(2, vocab=16, dtype=torch.float32, eos=0)
    lm = CausalLM(model, name="tiny")
    prompt, n, temp = [3, 4, 5], 4000, 0.7
    seqs = D.sample_batch(lm, [prompt] * n, D.SampleConfig(max_new_tokens=1, temperature=temp, top_k=0),
                          eos_ids=set(), generator=torch.Generator().manual_seed(11))
    counts = torch.bincount(torch.tensor([int(s["ids"][-1]) for s in seqs]), minlength=16).double()
    with torch.no_grad():
        law = torch.softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1].double() / temp, -1)
    assert chisquare(counts.numpy(), (law * n).numpy()).pvalue > 1e-4


def test_ids_only_sampling_draws_the_same_tokens_and_keeps_no_labels(tmp_path):
    model = tiny_llama(0, vocab=16, dtype=torch.float32, eos=0)
    lm = CausalLM(model, name="tiny")
    prompts = [[3, 4, 5], [7, 8, 9, 10, 11, 12, 13], [2]]
    kw = dict(eos_ids={0})
    labelled = D.sample_batch(lm, prompts, D.SampleConfig(max_new_tokens=6, top_k=4), generator=torch.Generator().manual_seed(5), **kw)
    bare = D.sample_batch(lm, prompts, D.SampleConfig(max_new_tokens=6, top_k=0), generator=torch.Generator().manual_seed(5), **kw)
    assert [s["ids"].tolist() for s in bare] == [s["ids"].tolist() for s in labelled]
    assert all("topk_p" not in s and "topk_ids" not in s for s in bare)
    D.save_torch_file({"seqs": bare, "meta": {}}, tmp_path / "shard_00000.pt")
    stats = D.shard_stats(tmp_path)
    assert stats["sequences"] == 3 and stats["topk_mass"] is None
    with pytest.raises(ValueError, match="--top-k"):
        T.load_sequences(tmp_path)  # a distilled draft needs the soft labels


@pytest.fixture(scope="module")
def tiny_text_target(tiny_model_dir):
    return load_model(tiny_model_dir, dtype="float32")


def _prompts(n):
    words = ["the cat sat", "a dog ran to the park", "big red mat", "small blue dog and cat", "the park"]
    return [words[i % len(words)] + (" on the mat" * (i % 3)) for i in range(n)]


def test_generate_shards_resume_reproduces(tmp_path, tiny_text_target):
    cfg = D.SampleConfig(batch_size=2, max_new_tokens=5, top_k=8, seed=3)
    stats = D.generate_shards(tiny_text_target, _prompts(6), tmp_path, cfg, progress=False)
    assert stats["shards"] == 3 and stats["sequences"] == 6 and stats["sampled_tokens"] > 0
    assert 0 < stats["topk_mass"] <= 1.0 + 1e-3
    first = torch.load(tmp_path / "shard_00001.pt", weights_only=False)["seqs"]
    (tmp_path / "shard_00001.pt").unlink()
    D.generate_shards(tiny_text_target, _prompts(6), tmp_path, cfg, progress=False)  # redoes only shard 1
    again = torch.load(tmp_path / "shard_00001.pt", weights_only=False)["seqs"]
    assert [s["ids"].tolist() for s in first] == [s["ids"].tolist() for s in again]
    assert len(list(D.iter_shards(tmp_path))) == 6


def test_teacher_force_shards(tmp_path, tiny_text_target):
    stats = D.teacher_force_shards(tiny_text_target, ["the cat sat on the mat and the dog ran to the park"] * 3,
                                   tmp_path, seq_len=6, batch_size=2, top_k=16, progress=False)
    assert stats["sequences"] == 6 and stats["sampled_tokens"] == stats["tokens"]
    assert abs(stats["topk_mass"] - 1.0) < 1e-2
    capped = D.teacher_force_shards(tiny_text_target, ["the cat sat on the mat and the dog ran to the park"] * 3,
                                    tmp_path / "capped", seq_len=6, batch_size=2, top_k=16, progress=False, max_tokens=7)
    assert capped["sequences"] == 2  # pieces up to the first that reaches 7 tokens


def test_extra_raw_text_keeps_heldout_topics_out():
    base, extra = C.raw_texts("train"), C.raw_texts("train", extra=True)
    assert len(extra) > len(base) and extra[:len(base)] == base
    held = C.heldout_shingles()
    assert not any(C._shingles(t) & held for t in extra[len(base):][:200])


# ----------------------------------------------------------------------------- loss and training
def test_distill_loss_is_minimised_by_the_target():
    torch.manual_seed(0)
    V, k = 12, 12
    logits_p = torch.randn(1, 5, V) * 2
    p = torch.softmax(logits_p[:, :-1], -1)
    tp, ti = torch.topk(p, k, -1)
    batch = {"labels": torch.randint(0, V, (1, 4)), "topk_ids": ti, "topk_p": tp, "weight": torch.ones(1, 4),
             "soft": torch.ones(1, 4, dtype=torch.bool)}
    loss_p, m = T.distill_loss(logits_p, batch, ce_weight=0.0)
    entropy = -(p * p.log()).sum(-1).mean()
    assert abs(m["kd"] - float(entropy)) < 1e-5 and abs(m["alpha_topk"] - 1.0) < 1e-5 and m["greedy_agree"] == 1.0
    other = T.distill_loss(torch.randn(1, 5, V), batch, ce_weight=0.0)[0]
    assert float(other) > float(loss_p)


def test_train_resume_export_and_load(tmp_path, tiny_text_target):
    from transformers import AutoModelForCausalLM

    data = tmp_path / "data"
    D.generate_shards(tiny_text_target, _prompts(8), data, D.SampleConfig(batch_size=4, max_new_tokens=6, top_k=8),
                      progress=False)
    arch = T.DraftArch(hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32)
    cfg = T.TrainConfig(arch=arch, epochs=6, batch_tokens=64, lr=1e-2, warmup=2, ckpt_every=1, eval_every=5, seed=1)
    run = tmp_path / "run"
    T.train_draft(tiny_text_target.model, [data], run, cfg, val_dirs=[data], progress=False, max_steps=3)
    state = torch.load(run / "ckpt.pt", weights_only=False)
    assert state["step"] == 3
    model = T.train_draft(tiny_text_target.model, [data], run, cfg, val_dirs=[data], progress=False)  # resumes
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in log]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > 3
    assert log[-1]["loss"] < log[0]["loss"]
    assert "val" in log[-1]
    out = T.export_draft(model, tmp_path / "export", tokenizer=tiny_text_target.tokenizer)
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert loaded.config.vocab_size == 16 and loaded.config.tie_word_embeddings
    assert next(loaded.parameters()).dtype == torch.bfloat16
    draft = load_model(out, dtype="float32")
    assert draft.vocab_size == tiny_text_target.vocab_size


def test_pca_init_copies_target_geometry():
    target = tiny_llama(0, vocab=16, dtype=torch.float32, hidden=32)
    draft = T.init_draft(target, T.DraftArch(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=32))
    E, Ed = target.get_input_embeddings().weight, draft.get_input_embeddings().weight
    assert torch.allclose(E @ E.T, Ed @ Ed.T, atol=1e-3)  # full rank: an orthogonal change of basis
    assert draft.lm_head.weight.data_ptr() == draft.get_input_embeddings().weight.data_ptr()


# ----------------------------------------------------------------------------- evaluation
def test_held_out_alpha_is_one_for_the_target_itself(tiny_model_dir, tiny_text_target):
    twin = load_model(tiny_model_dir, dtype="float32")
    for t in (1.0, 0.0):
        res = held_out_alpha(tiny_text_target, twin, _prompts(3), temperature=t, max_new_tokens=5, progress=False)
        assert res["positions"] > 0 and abs(res["alpha"] - 1.0) < 1e-5
    other = CausalLM(tiny_llama(5, vocab=16, dtype=torch.float32), name="other")
    res = held_out_alpha(tiny_text_target, other, _prompts(3), temperature=1.0, max_new_tokens=5, progress=False)
    assert 0.0 <= res["alpha"] < 0.999
    c = cost_coefficient(tiny_text_target, twin, context_tokens=8, reps=3)
    assert c["c"] > 0 and c["target_ms"] > 0 and c["c_step"] >= c["c"] * 0.5


def test_cli_registers_distill():
    from specot.cli.main import build_parser

    args = build_parser().parse_args(["distill", "train", "--data", "x", "--out", "y", "--hidden", "64"])
    assert args.hidden == 64 and args.func.__name__ == "_run_train"


def test_sampled_loss_matches_full_loss_when_no_negatives_are_needed():
    """With every vocabulary token in U (tiny V, full top-k), the sampled loss is the exact loss."""
    torch.manual_seed(0)
    target = tiny_llama(0, vocab=16, dtype=torch.float32, hidden=32)
    draft = T.init_draft(target, T.DraftArch(hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32))
    ids = torch.randint(0, 16, (2, 7))
    p = torch.softmax(torch.randn(2, 6, 16), -1)
    tp, ti = torch.topk(p, 16, -1)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids[:, 1:], "topk_ids": ti,
             "topk_p": tp, "weight": torch.ones(2, 6), "soft": torch.ones(2, 6, dtype=torch.bool)}
    full, mf = T.distill_loss(draft(input_ids=ids).logits, batch, 0.2)
    samp, ms = T.sampled_distill_loss(draft, batch, 0.2, negatives=8, train_topk=16)
    assert abs(float(full.detach()) - float(samp.detach())) < 1e-5 and abs(mf["alpha_topk"] - ms["alpha_topk"]) < 1e-5
    # with a partial U the normaliser is estimated: close, not equal
    batch2 = dict(batch, topk_ids=ti[..., :3], topk_p=tp[..., :3])
    est = T.sampled_distill_loss(draft, batch2, 0.2, negatives=4000, train_topk=3,
                                 generator=torch.Generator().manual_seed(0))[0]
    exact = T.distill_loss(draft(input_ids=ids).logits, batch2, 0.2)[0]
    assert abs(float(est.detach()) - float(exact.detach())) < 0.05
