"""The shipped distilled draft (``specot/data/draft``): a standard Hugging Face checkpoint that loads
offline and shares the embedded target's vocabulary (``draft="distilled"``)."""

from __future__ import annotations

import pytest
import torch

from specot.models.embedded import embedded_draft_dir, load_embedded_draft


def test_checkpoint_files_and_size():
    d = embedded_draft_dir()
    assert (d / "config.json").exists() and (d / "model.safetensors").exists()
    total = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
    assert total <= 30 * 2**20, f"{total / 2**20:.1f} MB > 30 MB"


def test_loads_with_automodel_offline():
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    d = embedded_draft_dir()
    cfg = AutoConfig.from_pretrained(d)
    assert cfg.model_type == "llama" and cfg.vocab_size == 49152 and cfg.tie_word_embeddings
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) < 15_000_000
    tok = AutoTokenizer.from_pretrained(d)
    assert len(tok) == 49152 and tok.eos_token == "<|im_end|>" and tok.chat_template
    with torch.no_grad():
        out = model(input_ids=torch.tensor([tok("def f(x):")["input_ids"]]))
    assert out.logits.shape[-1] == 49152 and torch.isfinite(out.logits).all()


def test_load_embedded_draft_dtype_and_cli_default():
    from specot.cli.main import build_parser

    draft = load_embedded_draft(dtype="float32")
    assert draft.dtype == torch.float32 and draft.vocab_size == 49152
    args = build_parser().parse_args(["generate", "--prompt", "hi"])
    assert args.draft == "auto"


@pytest.mark.slow
@pytest.mark.real_model
def test_distilled_draft_greedy_speculative_equals_autoregressive():
    import specot
    from specot.drafting.model import ModelDrafter, check_vocab_compatible
    from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate
    from specot.sampling import SamplingConfig

    target = specot.load_embedded_target()
    drafter = specot.load_drafter("distilled", target)
    assert isinstance(drafter, ModelDrafter) and drafter.name == "specot-distilled-draft"
    check_vocab_compatible(target, drafter.model)
    ids = target.encode_prompt("What does the Python `with` statement do?")
    cfg = GenerationConfig(max_new_tokens=24, gamma=3, sampling=SamplingConfig(0.0))
    ar = autoregressive_generate(target, ids, cfg)
    sd = speculative_generate(target, drafter, ids, cfg)
    assert sd.tokens == ar.tokens
    assert sd.stats.target_calls < ar.stats.target_calls  # the draft gets some tokens accepted
