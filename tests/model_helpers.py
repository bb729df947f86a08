"""Model helpers shared by the tests: tiny random Llama models built from a config (no hub access)
and the measurement scripts of ``benchmarks/`` loaded as modules. A plain module, imported by name
(``from model_helpers import tiny_lm``): several test folders have a ``conftest.py`` of their own,
so ``conftest`` is not a name to import from."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import torch

from specot.models import CausalLM


def tiny_llama(seed: int, vocab: int = 16, dtype: torch.dtype = torch.float64, layers: int = 2,
               hidden: int = 32, max_pos: int = 256, eos: int | None = None):
    """A random LlamaForCausalLM; weights scaled up so its distributions are far from uniform."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_pos,
                      eos_token_id=eos, bos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # sharper next-token distributions
    return model.to(dtype).eval()


def tiny_lm(seed: int, **kw) -> CausalLM:
    return CausalLM(tiny_llama(seed, **kw), name=f"tiny-{seed}")


def load_script(name: str) -> ModuleType:
    """``benchmarks/**/<name>.py`` as a module (the measurement scripts are files, not an importable
    package); ``name`` may include its folder (``"gpu/cuda_check"``)."""
    root = Path(__file__).resolve().parents[1] / "benchmarks"
    found = [root / f"{name}.py"] if (root / f"{name}.py").exists() else sorted(root.rglob(f"{name}.py"))
    if len(found) != 1:
        raise FileNotFoundError(f"benchmarks/ holds {len(found)} scripts named {name}.py")
    path = found[0]
    spec = importlib.util.spec_from_file_location(Path(name).name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod
